"""ortbench: train, benchmark and profile ONNX models with onnxruntime-training."""

from .onnxruntime_import import leave_out_torch

__version__ = "0.1.0"

leave_out_torch()
