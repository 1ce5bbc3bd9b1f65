"""Gradient graphs: onnxruntime-training's gradient builder and the graphs made ready for
it (:mod:`.derivative`, :mod:`.ort_preparation`), and the portable reverse mode of standard
operators (:mod:`.portable`, one rule file per operator family in :mod:`.portable_rules`)."""
