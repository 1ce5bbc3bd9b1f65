#!/usr/bin/env bash
# Make onnxruntime-gpu importable on a GPU machine that cannot download packages, for the
# portable backend's CUDA paths (README: "Tests"; tests/test_cuda.py).
#
# Run it in the repository root and evaluate what it prints:
#
#     eval "$(bash tools/gpu-setup.sh)"
#     python -c "import onnxruntime as o; print(o.get_available_providers())"
#
# What it expects there (brought from a machine with network access):
#   .gpuwheel/            the onnxruntime-gpu wheel (onnxruntime_gpu-*.whl), or the parts of
#                         the wheel: .gpuwheel/part00/x.00, part01/x.01, ... as cut by
#                         `split -b 60m -d` or tools/gpu-pack.py (joined here in
#                         order), and optionally
#                         .gpuwheel/MD5 (`md5sum` of the whole wheel) to check the join
#   .gpuwhl/*.whl         optional: other wheels the machine lacks (skl2onnx, say)
# Environment (all optional):
#   WHEEL=/path/x.whl     an already joined wheel (skips the joining)
#   PYTHON=python3        the interpreter whose environment holds torch and the CUDA
#                         libraries (nvidia/cu13/lib, nvidia/cudnn/lib in site-packages)
#   TARGET=/tmp/ortgpu    where the wheels are installed (pip install --target)
#
# It prints only `export` lines on stdout (PYTHONPATH: the target folder first, so that it
# shadows any CPU onnxruntime installed there, then the repository; LD_LIBRARY_PATH: the
# CUDA 13 and cuDNN libraries onnxruntime-gpu loads); progress goes to stderr.
set -euo pipefail

python=${PYTHON:-python3}
target=${TARGET:-/tmp/ortgpu}
repo=$(pwd)
say() { echo "gpu-setup: $*" >&2; }

# 1. The wheel: given, present whole, or joined from its parts.
wheel=${WHEEL:-}
if [ -z "$wheel" ]; then
  wheel=$(ls .gpuwheel/*.whl 2>/dev/null | head -n 1 || true)
fi
if [ -z "$wheel" ]; then
  parts=$(ls .gpuwheel/part*/x.* 2>/dev/null | sort || true)
  [ -n "$parts" ] || { say "no wheel and no parts of the wheel under .gpuwheel/"; exit 1; }
  joined=$(mktemp -d)/joined.zip
  # shellcheck disable=SC2086  # the part names hold no spaces
  cat $parts > "$joined"
  # pip needs the wheel's real file name: read it from the MD5 line, else from the
  # wheel's own dist-info (its name, version and tag)
  name=""
  if [ -f .gpuwheel/MD5 ]; then
    name=$(awk '{print $2}' .gpuwheel/MD5)
    name=${name##*/}
  fi
  if [ -z "$name" ]; then
    name=$("$python" - "$joined" <<'EOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
info = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
tag = next(l.split(":", 1)[1].strip() for l in z.read(info).decode().splitlines() if l.startswith("Tag:"))
print(f"{info.split('/')[0][: -len('.dist-info')]}-{tag}.whl")
EOF
)
  fi
  wheel=$(dirname "$joined")/$name
  mv "$joined" "$wheel"
  say "joined $(echo "$parts" | wc -l) parts into $wheel"
fi

# 2. Check it against the MD5 line, when there is one.
if [ -f .gpuwheel/MD5 ]; then
  want=$(awk '{print $1}' .gpuwheel/MD5)
  have=$(md5sum "$wheel" | awk '{print $1}')
  [ "$want" = "$have" ] || { say "md5 mismatch for $wheel: $have, expected $want"; exit 1; }
  say "md5 ok"
fi

# 3. Install it and the other wheels into the target folder. Their dependencies (numpy,
#    protobuf, flatbuffers, onnx, scikit-learn...) come from the machine's environment.
extra=$(ls .gpuwhl/*.whl 2>/dev/null || true)
# shellcheck disable=SC2086
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$target" "$wheel" $extra >&2
say "installed into $target: $(basename "$wheel") $(for w in $extra; do basename "$w"; done | tr '\n' ' ')"

# 4. The CUDA and cuDNN libraries of the machine's Python environment (torch's wheels put
#    them under site-packages/nvidia/).
libs=""
for site in $("$python" -c 'import site, sysconfig; print(" ".join({sysconfig.get_paths()["purelib"], *site.getsitepackages()}))'); do
  for d in "$site/nvidia/cu13/lib" "$site/nvidia/cudnn/lib"; do
    [ -d "$d" ] && libs="$libs${libs:+:}$d"
  done
done
[ -n "$libs" ] || say "warning: no nvidia/cu13/lib or nvidia/cudnn/lib found; CUDA may not load"

pythonpath="$target:$repo${PYTHONPATH:+:$PYTHONPATH}"
ld_library_path="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# 5. Say what onnxruntime offers with these settings.
PYTHONPATH=$pythonpath LD_LIBRARY_PATH=$ld_library_path "$python" -c \
  'import onnxruntime as o; print("gpu-setup:", o.__version__, o.__file__, o.get_available_providers())' >&2

echo "export PYTHONPATH=$pythonpath"
echo "export LD_LIBRARY_PATH=$ld_library_path"
