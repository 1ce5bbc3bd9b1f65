"""Make the onnxruntime-gpu wheel small enough to carry to a GPU machine without network.

    python tools/gpu-pack.py onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl

writes ``.gpuwheel/partNN/x.NN`` (parts of at most 58 MiB) and ``.gpuwheel/MD5``, the
layout ``tools/gpu-setup.sh`` joins. The wheel's members are recompressed with LZMA first
(pip reads such a wheel; the files inside are unchanged): onnxruntime-gpu 1.31.1 goes from
255 MB to 205 MB, four parts instead of five. Recompressing takes about 4 minutes.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

PART_BYTES = 58 * 2**20


def main(wheel: str, out: str = ".gpuwheel") -> None:
    folder = Path(out)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        packed = Path(tmp) / Path(wheel).name
        with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(packed, "w", zipfile.ZIP_LZMA) as dst:
            for info in src.infolist():
                dst.writestr(info.filename, src.read(info.filename))
        data = packed.read_bytes()
    for k in range(0, len(data), PART_BYTES):
        part = folder / f"part{k // PART_BYTES:02d}"
        part.mkdir()
        (part / f"x.{k // PART_BYTES:02d}").write_bytes(data[k : k + PART_BYTES])
    (folder / "MD5").write_text(f"{hashlib.md5(data).hexdigest()}  {Path(wheel).name}\n")
    print(f"{len(data) / 1e6:.0f} MB in {-(-len(data) // PART_BYTES)} parts under {folder}/")


if __name__ == "__main__":
    main(*sys.argv[1:])
