"""What a result was measured with: library versions and the machine."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys

import numpy
import onnx
import onnxruntime
import skl2onnx
import sklearn

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
    }


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
    """CPU model, physical cores, logical CPUs available to this process, platform."""
    if hasattr(os, "sched_getaffinity"):
        threads = len(os.sched_getaffinity(0))
    else:
        threads = os.cpu_count()
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": _physical_cores() or threads,
        "cpu_threads": threads,
        "platform": f"{sys.platform}-{platform.machine()}",
    }
