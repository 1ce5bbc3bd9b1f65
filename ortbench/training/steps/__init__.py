"""How onnxruntime runs a training step: staged batches, weight buffers and one step
object per trainer and backend, all with the interface of :mod:`.protocol`."""
