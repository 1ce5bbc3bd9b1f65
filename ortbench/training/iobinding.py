"""IOBinding with a pointer cache: bind once, rebind only when a buffer moved.

``session.run(numpy feeds)`` costs about 20 us for a one-node graph on these machines,
``run_with_iobinding`` about 4 us. :class:`CachedBinding` remembers the buffer address it
bound for each name and skips the call when the same buffer comes again, which is the
common case for weights, labels and preallocated outputs.
"""

from __future__ import annotations

import onnxruntime
from onnxruntime.capi import _pybind_state as C


def make_session(model: bytes, options, providers: list) -> C.InferenceSession:
    """A C-level InferenceSession (the Python wrapper adds nothing on the hot path)."""
    return onnxruntime.InferenceSession(model, options, providers=providers)._sess


class CachedBinding:
    """One IOBinding over a session, with the addresses it holds per name."""

    def __init__(self, session: C.InferenceSession):
        self.session = session
        self.binding = C.SessionIOBinding(session)
        self.run_options = C.RunOptions()
        self._inputs: dict[str, int] = {}
        self._outputs: dict[str, int] = {}

    def bind_input(self, name: str, value: C.OrtValue) -> None:
        """Bind ``value`` to input ``name`` unless that buffer is already bound there."""
        ptr = value.data_ptr()
        if self._inputs.get(name) != ptr:
            self.binding.bind_ortvalue_input(name, value)
            self._inputs[name] = ptr

    def bind_output(self, name: str, value: C.OrtValue) -> None:
        """Bind a preallocated ``value`` to output ``name`` unless already bound there."""
        ptr = value.data_ptr()
        if self._outputs.get(name) != ptr:
            self.binding.bind_ortvalue_output(name, value)
            self._outputs[name] = ptr

    def run(self) -> None:
        """Run the session on the current bindings."""
        self.session.run_with_iobinding(self.binding, self.run_options)
