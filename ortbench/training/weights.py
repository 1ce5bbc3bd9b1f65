"""Weights, optimizer states and gradients of the trainers that own their weights.

The update graph costs about 1 to 3 us per node on CPU, so it should not grow with the
number of weights. On CPU every weight, state and gradient therefore lives in one flat
host array per role and parity, and the per-weight OrtValues TrainingAgent reads and
writes are views into it: the update graph sees one tensor ("weights") whatever the
model. On CUDA, where no view of a device buffer can be made, each weight is its own
group. Buffers come in two parities: a step's update reads one and writes the other.
"""

from __future__ import annotations

import numpy as np
from onnxruntime.capi import _pybind_state as C


class WeightBuffers:
    """Double-buffered weights and states, gradients, and the update graph's groups."""

    def __init__(
        self,
        initial: dict[str, np.ndarray],
        n_states: int,
        device: C.OrtDevice,
        biases: set[str],
    ):
        self.names = list(initial)
        self._device = device
        self._on_cpu = device.device_type() == C.OrtDevice.cpu()
        arrays = {n: np.ascontiguousarray(v, dtype=np.float32) for n, v in initial.items()}
        if self._on_cpu:
            self.groups = {"weights": self.names}
            self.group_shapes = {"weights": [sum(a.size for a in arrays.values())]}
            mask = np.concatenate(
                [np.full(a.size, n not in biases, np.float32) for n, a in arrays.items()]
            )
            self.penalty_masks = {"weights": _simplify(mask)}
        else:
            self.groups = {n: [n] for n in self.names}
            self.group_shapes = {n: list(a.shape) for n, a in arrays.items()}
            self.penalty_masks = {n: n not in biases for n in self.names}
        self._shapes = {n: a.shape for n, a in arrays.items()}
        self._hosts: list[np.ndarray] = []  # CPU memory the OrtValues view
        flat = [np.concatenate([a.ravel() for a in arrays.values()])] if self._on_cpu else None
        # weights[p]: per-weight OrtValues; group_weights[p]: what the update graph reads
        self.weights, self.group_weights = zip(*(self._alloc(arrays, flat) for _ in range(2)))
        # states[p][k]: the group values of state k in parity p
        self.states = [[self._alloc_zeros()[1] for _ in range(n_states)] for _ in range(2)]
        self.grads, self.group_grads = self._alloc_zeros()

    def _alloc(self, arrays: dict[str, np.ndarray], flat) -> tuple[list, list]:
        """Per-weight values and group values holding ``arrays``."""
        if self._on_cpu:
            host = flat[0].copy()
            self._hosts.append(host)
            views, offset = [], 0
            for name in self.names:
                size = arrays[name].size
                view = host[offset : offset + size].reshape(self._shapes[name])
                views.append(C.OrtValue.ortvalue_from_numpy(view, self._device))
                offset += size
            return views, [C.OrtValue.ortvalue_from_numpy(host, self._device)]
        values = [C.OrtValue.ortvalue_from_numpy(arrays[n], self._device) for n in self.names]
        return values, values

    def _alloc_zeros(self) -> tuple[list, list]:
        zeros = {n: np.zeros(s, np.float32) for n, s in self._shapes.items()}
        flat = [np.zeros(sum(z.size for z in zeros.values()), np.float32)]
        return self._alloc(zeros, flat if self._on_cpu else None)

    def get(self, parity: int) -> dict[str, np.ndarray]:
        """Copies of the weights of one parity, by name."""
        return {n: v.numpy().copy() for n, v in zip(self.names, self.weights[parity])}

    def set(self, parity: int, name: str, array: np.ndarray) -> None:
        """Overwrite one weight of one parity in place (the bindings stay valid)."""
        self.weights[parity][self.names.index(name)].update_inplace(
            np.ascontiguousarray(array, dtype=np.float32)
        )

    def shape(self, name: str) -> tuple:
        return self._shapes[name]


def _simplify(mask: np.ndarray):
    """True or False when the mask is uniform (no node needed), else the mask itself."""
    if mask.all():
        return True
    if not mask.any():
        return False
    return mask
