"""Weights, optimizer state, steps and gradients of the trainers that own their weights.

Each node of the update graph costs a kernel launch per step on CPU, so the graph should
not grow with the number of weights. On CPU every weight lives in one flat host array per parity, and the
per-weight OrtValues TrainingAgent reads are views into it: the update graph sees one
tensor ("weights") whatever the model. The step (the scaled gradient the backward pass
writes, see ``learning_rates.py``) is flat too, and so is the optimizer state. With a
state, the five flat tensors are the rows of one array, ``[w0, s0, e, s1, w1]``, so
that what an update reads is always adjacent: parity 0 reads rows 0-2 (and 1-2 for the
state) and writes rows 4 and 3, parity 1 reads rows 2-4 (and 2-3) and writes rows 0
and 1.
Every flat array starts on a 64-byte cache line and its length is padded to a whole number
of lines with zeros that stay zero (no view covers them, so their step is always 0): the
rows of the stacked array then start on cache lines too. Unpadded, rows of a length that
is not a multiple of 16 start at a different offset within a line each, which slows the
momentum update's matrix-vector products (measured in ``benchmarks/README.md``).
On CUDA, where no view of a device buffer can be made, each weight is its own group and
nothing is stacked. Weights and states come in two parities: a step reads one and
writes the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx

from ..errors import OrtBenchError
from ..graphs.loading import fit_runtime
from ..runtime import capi

if TYPE_CHECKING:
    from ..learning_rates import BaseLearningRate
    from ..runtime.sessions import SessionMaker

#: float32 values per 64-byte cache line.
LINE = 16


def flat_width(size: int) -> int:
    """The length of a flat array holding ``size`` values: whole cache lines."""
    return -(-size // LINE) * LINE


class WeightBuffers:
    """Double-buffered weights and state, the step, and the update graph's groups."""

    def __init__(
        self,
        initial: dict[str, np.ndarray],
        n_states: int,
        device: capi.OrtDevice,
        biases: set[str],
    ):
        if n_states not in (0, 1):
            raise OrtBenchError(f"an optimizer with {n_states} states is not supported here")
        self.names = list(initial)
        self.has_state = n_states == 1
        self._device = device
        self.on_cpu = device.device_type() == capi.OrtDevice.cpu()
        arrays = {n: np.ascontiguousarray(v, dtype=np.float32) for n, v in initial.items()}
        self._shapes = {n: a.shape for n, a in arrays.items()}
        self._hosts: list[np.ndarray] = []  # CPU memory the OrtValues view
        if self.on_cpu:
            self._init_flat(arrays, biases)
        else:
            self._init_per_weight(arrays, biases)

    def _init_flat(self, arrays: dict[str, np.ndarray], biases: set[str]) -> None:
        size = sum(a.size for a in arrays.values())
        width = flat_width(size)
        self.groups = {"weights": self.names}
        self.group_shapes = {"weights": [width]}
        mask = np.concatenate(
            [np.full(a.size, n not in biases, np.float32) for n, a in arrays.items()]
        )
        # the padding stays zero, so its mask is free: chosen to keep a uniform mask uniform
        padding = np.full(width - size, mask.any(), np.float32)
        self.penalty_masks = {"weights": _simplify(np.concatenate([mask, padding]))}
        flat = np.concatenate([a.ravel() for a in arrays.values()])
        if self.has_state:
            rows = self._host(_aligned_zeros((5, width)))
            rows[0, :size], rows[4, :size] = flat, flat
            weights, step, states = [rows[0], rows[4]], rows[2], [rows[1], rows[3]]
            self.states = [[self._value(s)] for s in states]
            #: parity p's update: (w, s, e) rows, (s, e) rows, new weight row, new state row
            self.stacked = [
                tuple(self._value(rows[a:b]) for a, b in ((0, 3), (1, 3), (4, 5), (3, 4))),
                tuple(self._value(rows[a:b]) for a, b in ((2, 5), (2, 4), (0, 1), (1, 2))),
            ]
        else:
            weights = [self._host(_aligned_zeros(width)) for _ in (0, 1)]
            for w in weights:
                w[:size] = flat
            step = self._host(_aligned_zeros(width))
        self.weights = [self._views(w) for w in weights]
        self.group_weights = [[self._value(w)] for w in weights]
        self.grads, self.group_grads = self._views(step), [self._value(step)]

    def _init_per_weight(self, arrays: dict[str, np.ndarray], biases: set[str]) -> None:
        self.groups = {n: [n] for n in self.names}
        self.group_shapes = {n: list(a.shape) for n, a in arrays.items()}
        self.penalty_masks = {n: n not in biases for n in self.names}
        self.weights = [[self._value(a) for a in arrays.values()] for _ in (0, 1)]
        self.group_weights = self.weights
        zeros = [np.zeros(a.shape, np.float32) for a in arrays.values()]
        self.grads = self.group_grads = [self._value(z) for z in zeros]
        if self.has_state:
            self.states = [[self._value(z) for z in zeros] for _ in (0, 1)]

    @staticmethod
    def stacked_coefficients(c_s: float, c_e: float) -> list[np.ndarray]:
        """The state update's (1, 2) coefficients in each parity's row order: parity 0
        reads (s0, e), parity 1 reads (e, s1)."""
        return [np.array([[c_s, c_e]], np.float32), np.array([[c_e, c_s]], np.float32)]

    def stacked_update(
        self, rate: BaseLearningRate, sessions: SessionMaker
    ) -> tuple[onnx.ModelProto, capi.InferenceSession, list[capi.Binding]]:
        """The momentum update over the stacked rows (CPU, with a state): the rate's
        ``build_stacked_function`` graph, its session (:meth:`SessionMaker.update_session`)
        and its bindings for parity 0 and for parity 1. Each binding reads its parity's
        weight and state and the step row, and writes the other parity's."""
        (size,) = self.group_shapes["weights"]
        model = rate.build_stacked_function(size)
        session = sessions.update_session(fit_runtime(model).SerializeToString())
        bindings = []
        self._coefficients = self.stacked_coefficients(*rate.state_coefficients())
        for src, coefficients in enumerate(self._coefficients):  # the bindings view them
            rows, state_rows, new_weight, new_state = self.stacked[src]
            binding = capi.Binding(session)
            binding.bind_input("weight_state_step", rows)
            binding.bind_input("state_step", state_rows)
            binding.bind_input("state_coefficients", self._value(coefficients))
            binding.bind_output("weight_new", new_weight)
            binding.bind_output("state_new", new_state)
            bindings.append(binding)
        return model, session, bindings

    def _host(self, array: np.ndarray) -> np.ndarray:
        self._hosts.append(array)
        return array

    def _value(self, array: np.ndarray) -> capi.OrtValue:
        return capi.OrtValue.ortvalue_from_numpy(array, self._device)

    def _views(self, flat: np.ndarray) -> list[capi.OrtValue]:
        """Per-weight OrtValues viewing consecutive slices of ``flat``."""
        views, offset = [], 0
        for name in self.names:
            shape = self._shapes[name]
            size = int(np.prod(shape))
            views.append(self._value(flat[offset : offset + size].reshape(shape)))
            offset += size
        return views

    def get(self, parity: int) -> dict[str, np.ndarray]:
        """Copies of the weights of one parity, by name."""
        return {n: v.numpy().copy() for n, v in zip(self.names, self.weights[parity])}

    def set(self, parity: int, name: str, array: np.ndarray) -> None:
        """Overwrite one weight of one parity in place (the bindings stay valid)."""
        self.weights[parity][self.names.index(name)].update_inplace(
            np.ascontiguousarray(array, dtype=np.float32)
        )

    def get_states(self, parity: int) -> list[np.ndarray]:
        """Copies of the optimizer state tensors of one parity, one per group."""
        return [v.numpy().copy() for v in self.states[parity]]

    def set_states(self, parity: int, arrays: list[np.ndarray]) -> None:
        """Overwrite the optimizer state of one parity in place (bindings stay valid)."""
        values = self.states[parity]
        if len(arrays) != len(values) or any(
            tuple(a.shape) != tuple(v.shape()) for a, v in zip(arrays, values)
        ):
            raise OrtBenchError("the optimizer state does not match this trainer's weights")
        for value, array in zip(values, arrays):
            value.update_inplace(np.ascontiguousarray(array, dtype=np.float32))

    def shape(self, name: str) -> tuple:
        return self._shapes[name]


class DoubleBufferedSteps:
    """The weight access of step objects whose weights are :class:`WeightBuffers`: the
    weights of parity ``_parity`` are the current ones (the next step reads them)."""

    _buffers: WeightBuffers
    _parity: int

    def get_state(self) -> dict[str, np.ndarray]:
        """Copies of the current weights, by name."""
        return self._buffers.get(self._parity)

    def shape(self, name: str) -> tuple:
        """The shape of the weight ``name``."""
        return self._buffers.shape(name)

    def set(self, name: str, array: np.ndarray) -> None:
        """Overwrite the current value of the weight ``name`` in place."""
        self._buffers.set(self._parity, name, array)

    def get_optimizer_state(self) -> list[np.ndarray] | None:
        """Copies of the current optimizer state (momentum), None without one."""
        buffers = self._buffers
        return buffers.get_states(self._parity) if buffers.has_state else None

    def set_optimizer_state(self, arrays: list[np.ndarray]) -> None:
        """Overwrite the current optimizer state with what :meth:`get_optimizer_state` gave."""
        self._buffers.set_states(self._parity, arrays)


def _aligned_zeros(shape) -> np.ndarray:
    """float32 zeros whose first value starts a cache line (numpy aligns to 16 bytes)."""
    size = int(np.prod(shape))
    raw = np.zeros(size + LINE, np.float32)
    start = (-raw.ctypes.data // 4) % LINE
    return raw[start : start + size].reshape(shape)


def _simplify(mask: np.ndarray):
    """True or False when the mask is uniform (no node needed), else the mask itself."""
    if mask.all():
        return True
    if not mask.any():
        return False
    return mask
