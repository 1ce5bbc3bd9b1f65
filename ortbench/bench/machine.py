"""What a result was measured with: library versions and the machine."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import numpy
import onnx
import onnxruntime
import skl2onnx
import sklearn
from onnx import TensorProto, helper
from threadpoolctl import threadpool_info

import ortbench


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    """Versions of Python and of every library a contender runs."""
    return {
        "python_version": platform.python_version(),
        "ortbench_version": ortbench.__version__,
        "numpy_version": numpy.__version__,
        "sklearn_version": sklearn.__version__,
        "onnx_version": onnx.__version__,
        "onnxruntime_version": onnxruntime.__version__,
        "skl2onnx_version": skl2onnx.__version__,
        "torch_version": _installed("torch"),
        "jax_version": _installed("jax"),
    }


def _owner(filepath: str) -> str:
    """The installed package a shared library came with: the folder under site-packages
    (``numpy.libs`` -> numpy), else the library's file name."""
    parts = Path(filepath).parts
    for k, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages"):
            return parts[k + 1].removesuffix(".libs").removeprefix(".")
    return parts[-1] if parts else "?"


def kernels() -> str:
    """The BLAS and OpenMP libraries loaded in this process, as threadpoolctl sees them.

    Returns
    -------
    str
        One entry per library, ``; ``-separated: implementation and version, kernel
        architecture (OpenBLAS, BLIS), thread count and the package it came with, e.g.
        ``openblas 0.3.30 SkylakeX 2 threads (numpy)``; ``""`` when none is loaded.
        onnxruntime's MLAS and XLA's kernels keep their own thread pools and are not listed.
    """
    entries = []
    for lib in threadpool_info():
        words = [lib.get("internal_api") or lib.get("user_api", "?")]
        if words[0] == "openmp":
            words.append(lib.get("prefix", ""))
        if lib.get("version"):
            words.append(str(lib["version"]))
        if lib.get("architecture"):
            words.append(str(lib["architecture"]))
        words.append(f"{lib.get('num_threads')} threads ({_owner(lib.get('filepath', ''))})")
        entries.append(" ".join(words))
    return "; ".join(sorted(entries))  # the order libraries were loaded in says nothing


#: Instruction-set levels of the pins below: 0 SSE, 1 AVX, 2 AVX2, 3 AVX-512.
_LEVELS = ("SSE", "AVX", "AVX2", "AVX-512")
#: OpenBLAS core types by level (names as OPENBLAS_CORETYPE takes them, lower case); any
#: other x86 core type is an SSE one.
_OPENBLAS_CORES = {
    "sandybridge": 1,
    "bulldozer": 1,
    "piledriver": 1,
    "steamroller": 1,
    "haswell": 2,
    "zen": 2,
    "excavator": 2,
    "skylakex": 3,
    "cooperlake": 3,
    "sapphirerapids": 3,
}


def _pin_level(variable: str, value: str) -> int | None:
    """The instruction-set level a kernel-pinning variable holds its library to (None:
    not a level this table knows)."""
    value = value.strip().lower()
    if variable == "OPENBLAS_CORETYPE":
        return _OPENBLAS_CORES.get(value, 0)
    if variable in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        value = value.replace("_", "")
    if value.startswith("avx512"):
        return 3
    if value.startswith("avx2"):
        return 2
    if value.startswith("avx"):
        return 1
    if value.startswith(("sse", "default")):
        return 0
    return None


#: Environment variables that hold a library's kernels to an instruction set.
PIN_VARIABLES = (
    "OPENBLAS_CORETYPE",  # OpenBLAS (numpy, scipy, scikit-learn)
    "MKL_ENABLE_INSTRUCTIONS",  # MKL
    "ONEDNN_MAX_CPU_ISA",  # oneDNN (torch)
    "DNNL_MAX_CPU_ISA",
    "ATEN_CPU_CAPABILITY",  # torch's own kernels
)


def cpu_level(flags: set[str] | None = None) -> int | None:
    """The highest instruction-set level of :data:`_LEVELS` the CPU runs (None: unknown);
    ``flags`` are /proc/cpuinfo's, read when not given."""
    if flags is None:
        try:
            with open("/proc/cpuinfo") as f:
                line = next((x for x in f if x.startswith("flags")), "")
        except OSError:
            return None
        flags = set(line.partition(":")[2].split())
    if not flags:
        return None
    for level, flag in ((3, "avx512f"), (2, "avx2"), (1, "avx")):
        if flag in flags:
            return level
    return 0


def kernel_pins(environ: Mapping[str, str] | None = None, level: int | None = None) -> str:
    """The environment variables that hold a library's kernels below what the CPU runs.

    Parameters
    ----------
    environ : mapping, optional
        The environment (this process's when not given).
    level : int, optional
        The CPU's instruction-set level (:func:`cpu_level` when not given).

    Returns
    -------
    str
        ``NAME=value (AVX2 on an AVX-512 CPU)`` for each such variable, ``; ``-separated;
        a variable whose level or CPU is unknown counts as holding back; ``""`` for none.
    """
    environ = os.environ if environ is None else environ
    level = cpu_level() if level is None else level
    pins = []
    for name in PIN_VARIABLES:
        value = environ.get(name, "").strip()
        if not value:
            continue
        pinned = _pin_level(name, value)
        if pinned is not None and level is not None and pinned >= level:
            continue
        held = "an unknown level" if pinned is None else _LEVELS[pinned]
        cpu = "an unknown" if level is None else f"an {_LEVELS[level]}"
        pins.append(f"{name}={value} ({held} on {cpu} CPU)")
    return "; ".join(pins)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _physical_cores() -> int | None:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return None
    cores = set()
    for block in text.split("\n\n"):
        fields = dict(
            (key.strip(), value.strip())
            for key, _, value in (line.partition(":") for line in block.splitlines())
        )
        if "core id" in fields:
            cores.add((fields.get("physical id"), fields["core id"]))
    return len(cores) or None


def machine() -> dict[str, object]:
    """CPU model, physical cores, logical CPUs available to this process, platform, the BLAS
    and OpenMP libraries loaded (:func:`kernels`) and the variables pinning them
    (:func:`kernel_pins`)."""
    if hasattr(os, "sched_getaffinity"):
        threads = len(os.sched_getaffinity(0))
    else:
        threads = os.cpu_count()
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": _physical_cores() or threads,
        "cpu_threads": threads,
        "platform": f"{sys.platform}-{platform.machine()}",
        "kernels": kernels(),
        "kernel_pins": kernel_pins(),
    }


def identity_model() -> onnx.ModelProto:
    """A graph of one Identity node: input ``X`` (float, shape [1]) -> output ``Y`` (= X)."""
    shape = [1]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "identity",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@cache
def cuda_answers() -> bool:
    """True when onnxruntime offers its CUDA provider and a session can run on a device."""
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return False
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    try:
        session = onnxruntime.InferenceSession(
            identity_model().SerializeToString(), options, providers=["CUDAExecutionProvider"]
        )
    except Exception:  # any failure to open a CUDA session means no usable device
        return False
    return "CUDAExecutionProvider" in session.get_providers()


def available_devices() -> tuple[str, ...]:
    """The devices this machine can train on: the CPU, and CUDA when a device answers."""
    return ("cpu", "cuda") if cuda_answers() else ("cpu",)
