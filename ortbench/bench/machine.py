"""What a result was measured with: library versions and the machine."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from functools import cache

import numpy
import onnx
import onnxruntime
import skl2onnx
import sklearn
from onnx import TensorProto, helper

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
