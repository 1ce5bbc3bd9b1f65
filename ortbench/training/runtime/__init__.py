"""The onnxruntime adapter: what the installed build is (:mod:`.build`), devices
(:mod:`.devices`) and sessions (:mod:`.sessions`) over the public API, and the C-level
objects below it (:mod:`.capi`, the one module that imports onnxruntime's internals)."""
