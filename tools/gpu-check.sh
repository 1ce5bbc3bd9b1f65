#!/usr/bin/env bash
# The GPU checks in one command, for a machine with an NVIDIA GPU and the wheel's parts under
# .gpuwheel/ (tools/gpu-pack.py): set up onnxruntime-gpu (tools/gpu-setup.sh), run the CUDA
# tests, bench the portable contenders, torch and JAX on the CPU and on CUDA, profile
# ort-portable-full on CUDA. Each step has a time limit; the whole takes about 4 minutes on
# an H200 machine of 16 cores.
#
#     bash tools/gpu-check.sh RESULTS_FOLDER
#
# RESULTS_FOLDER receives log.txt (versions, test output), a-results.csv and a-summary.md
# (batch 1, 16, 256 on 512 rows), b-results.csv and b-summary.md (batch 1024 and 4096 on
# 16,384 rows), operators.md (onnxruntime's CUDA kernel times).
set -uo pipefail
out=${1:?usage: gpu-check.sh RESULTS_FOLDER}
mkdir -p "$out"
work=$(mktemp -d)
start=$(date +%s)
say() { echo "[$(($(date +%s) - start)) s] $*"; }
# JAX takes 75% of the GPU's memory at its first use unless told not to
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

say "setup"
eval "$(bash tools/gpu-setup.sh)" || { say "setup failed"; exit 1; }
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import onnxruntime, torch; print('onnxruntime', onnxruntime.__version__, onnxruntime.get_available_providers(), 'torch', torch.__version__)"
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
  echo "$(nproc) cores"
} 2>&1 | tee "$out/log.txt"

say "CUDA tests"
timeout -k 5 100 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tee -a "$out/log.txt" | tail -3

contenders="ort-portable-full ort-portable-fwbw ort-portable-nesterov ort-portable-loop torch-sgd jax-sgd jax-scan"
bench() {  # NAME SECONDS OPTIONS...: a bench run, interrupted (its cells kept) at SECONDS
  local name=$1 limit=$2
  shift 2
  # shellcheck disable=SC2086  # the contenders are words
  timeout -s INT -k 15 "$limit" python3 -m ortbench bench --problem mlp --contenders $contenders \
    --devices cpu cuda --baseline torch-sgd --repeat 5 --keep-going --out "$work/$name" "$@" | tail -1
  for f in results.csv summary.md; do cp "$work/$name"/*/"$f" "$out/$name-$f"; done
}
say "bench, batch 1 to 256"
bench a 170 --batch-sizes 1 16 256 --n-samples 512
say "bench, batch 1024 and 4096"
bench b 110 --batch-sizes 1024 4096 --n-samples 16384

say "profile"
timeout -s INT -k 10 50 python3 -m ortbench profile ort-portable-full --problem mlp --batch-size 16 \
  --device cuda --out "$work/profile" | tail -1
cp "$work"/profile/*/profile-*/operators.md "$out/"
say "done"
