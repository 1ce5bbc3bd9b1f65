"""ortbench: train, benchmark and profile ONNX models with onnxruntime-training."""

__version__ = "0.1.0"
