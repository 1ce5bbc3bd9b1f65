"""What the engine computes, as ONNX graphs: the user's model loaded and edited, the small
graphs the engine writes (:mod:`.builder`) and the loss appended to a model."""
