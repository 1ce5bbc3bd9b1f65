"""The BLAS/OpenMP kernels a run records, and the line its summary gives a pinned kernel:
checked against what OpenBLAS itself reports (through threadpoolctl) in a child process
started with and without ``OPENBLAS_CORETYPE``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ortbench.bench.machine import cpu_level, kernel_pins
from ortbench.bench.store import RESULTS_CSV, read_results

ROOT = Path(__file__).resolve().parents[1]
#: an OpenBLAS core type one instruction-set level below each CPU level (index)
BELOW = {1: "Nehalem", 2: "SandyBridge", 3: "Haswell"}


@pytest.mark.parametrize(
    ("environ", "level", "expected"),
    [
        ({"OPENBLAS_CORETYPE": "Haswell"}, 3, "OPENBLAS_CORETYPE=Haswell (AVX2 on an AVX-512 CPU)"),
        ({"OPENBLAS_CORETYPE": "Haswell"}, 2, ""),
        ({"OPENBLAS_CORETYPE": "SkylakeX"}, 3, ""),
        ({"OPENBLAS_CORETYPE": "Prescott"}, 1, "OPENBLAS_CORETYPE=Prescott (SSE on an AVX CPU)"),
        ({"ATEN_CPU_CAPABILITY": "avx2", "PATH": "/bin"}, 3, "ATEN_CPU_CAPABILITY=avx2 (AVX2"),
        ({"MKL_ENABLE_INSTRUCTIONS": "AVX512_E1"}, 3, ""),
        ({"OPENBLAS_CORETYPE": ""}, 3, ""),
        ({}, 3, ""),
    ],
)
def test_kernel_pins_name_the_variable_only_below_the_cpu(environ, level, expected):
    found = kernel_pins(environ, level)
    assert found.startswith(expected) and bool(found) == bool(expected)


def test_cpu_level_reads_the_instruction_set_flags():
    assert cpu_level({"sse4_2", "avx", "avx2", "avx512f"}) == 3
    assert cpu_level({"sse4_2", "avx", "fma"}) == 1
    assert cpu_level({"fp", "asimd"}) == 0


def bench(tmp_path: Path, name: str, **environ: str) -> tuple[str, pd.DataFrame, Path]:
    """Run a small ``ortbench bench`` in a child process: its summary, results, folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    env |= {"PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]), **environ}
    out = tmp_path / name
    command = [sys.executable, "-m", "ortbench", "bench", "--contenders", "sklearn-mlp-sgd"]
    command += ["--problem", "mlp", "--dataset", "diabetes", "--batch-sizes", "16"]
    command += ["--epochs", "1", "--repeat", "1", "--n-samples", "200", "--keep-going"]
    command += ["--out", str(out)]
    subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    (folder,) = out.iterdir()
    return (folder / "summary.md").read_text(), read_results(folder), folder


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return bench(tmp_path_factory.mktemp("kernels"), "native")


def test_a_pinned_openblas_is_recorded_and_named_in_the_summary(tmp_path, native):
    level = cpu_level()
    if level not in BELOW:
        pytest.skip("no OpenBLAS core type below this CPU's")
    pinned = BELOW[level]
    text, results, _ = bench(tmp_path, "pinned", OPENBLAS_CORETYPE=pinned)
    # OpenBLAS took the pin (threadpoolctl reads its core type from the library, which
    # spells some names its own way: SandyBridge is "Sandybridge")
    kernels = results.kernels.iloc[-1]
    assert "openblas" in kernels and pinned.lower() in kernels.lower()
    (line,) = [x for x in text.splitlines() if x.startswith("Not the native kernels")]
    assert f"OPENBLAS_CORETYPE={pinned}" in line
    assert f"Kernels (threadpoolctl): {results.kernels.iloc[-1]}." in text

    text, results, _ = native
    assert pinned.lower() not in results.kernels.iloc[-1].lower()
    assert "Not the native kernels" not in text
    assert "openblas" in results.kernels.iloc[-1] and "threads (numpy)" in text


def test_results_from_before_the_kernel_columns_still_read(native):
    _, results, folder = native
    old = pd.read_csv(folder / RESULTS_CSV).drop(columns=["jax_version", "kernels", "kernel_pins"])
    old.to_csv(folder / RESULTS_CSV, index=False)
    again = read_results(folder)
    assert (again.kernels == "").all() and len(again) == len(results)
