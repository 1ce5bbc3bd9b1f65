"""Profilers of a training run: cProfile call trees, py-spy flame graphs, onnxruntime's own."""
