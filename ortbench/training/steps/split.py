"""Forward/backward steps on two sessions of standard operators (the portable backend).

:func:`~ortbench.training.gradients.portable.split_forward_backward` splits the model's
vector-Jacobian product into a forward graph, which also outputs the intermediate values
the gradient nodes read (the stash), and a backward graph. Both run on any onnxruntime
build, bound once per staged batch and weight parity; the stash lives in buffers the
first forward run allocates, which every later run overwrites.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import onnx

from ..gradients.portable import split_forward_backward
from ..graphs.weights import weights_as_inputs
from ..runtime import capi
from ..runtime.sessions import SessionMaker
from .batches import Batch
from .loss_update import LossUpdateSteps


class SplitStep(NamedTuple):
    """What one step of :class:`SplitSteps` runs over one staged batch."""

    #: (forward, backward) runs reading the weights of parity 0, then of parity 1.
    passes: tuple[tuple[Callable[[], None], Callable[[], None]], ...]
    #: Runs the loss graph bound to this batch.
    run_loss: Callable[[], None]
    #: The batch's real rows (the last batch may be padded).
    length: int


class SplitSteps(LossUpdateSteps):
    """Forward/backward training steps with portable forward and gradient sessions.

    Takes the parameters of :class:`~ortbench.training.steps.loss_update.LossUpdateSteps`.
    """

    large_sessions = 2
    predictions_kept = True

    def _build_passes(self, static: onnx.ModelProto, sessions: SessionMaker) -> dict:
        weights = self.weights
        self._input_name = next(i.name for i in static.graph.input if i.name not in weights)
        self._output_name = static.graph.output[0].name
        forward, backward, stash = split_forward_backward(
            weights_as_inputs(static, weights), weights
        )
        graphs = {"forward": forward, "backward": backward}
        relus = [n.output[0] for n in forward.graph.node if n.op_type == "Relu"]
        self._forward = sessions.graph_session(forward, "forward")
        self._backward = sessions.graph_session(backward, "backward", relu_outputs=relus)
        self._stash_names = [n for n in stash if n != self._output_name]
        self._backward_inputs = {i.name for i in backward.graph.input}
        self._stash_buffers: dict[str, capi.OrtValue] | None = None
        return graphs

    def _stash_values(self, batch: Batch) -> dict[str, capi.OrtValue]:
        """The buffers the forward pass hands to the backward pass, allocated by
        onnxruntime in one forward run (their shapes are then known)."""
        if self._stash_buffers is None:
            binding = capi.Binding(self._forward)
            binding.bind_input(self._input_name, batch.values[0])
            for name, value in zip(self.weights, self._buffers.weights[self._parity]):
                binding.bind_input(name, value)
            for name in [self._output_name, *self._stash_names]:
                binding.bind_output_to(name, self._device)
            binding.run()
            self._stash_buffers = dict(zip(self._stash_names, binding.outputs()[1:]))
        return self._stash_buffers

    def _bind_passes(self, batch: Batch, parity: int, stash: dict, loss_grad) -> tuple:
        """The forward and backward runs of one batch reading the weights of ``parity``;
        ``stash`` holds the prediction's buffer too."""
        forward, backward = capi.Binding(self._forward), capi.Binding(self._backward)
        values = {
            self._input_name: batch.values[0],
            **dict(zip(self.weights, self._buffers.weights[parity])),
        }
        for name, value in values.items():
            forward.bind_input(name, value)
        for name, value in stash.items():
            forward.bind_output(name, value)
        values.update(stash)
        upstream = f"{self._output_name}_grad"
        for name in self._backward_inputs - {upstream}:
            backward.bind_input(name, values[name])
        backward.bind_input(upstream, loss_grad)
        for name, grad in zip(self.weights, self._buffers.grads):
            backward.bind_output(f"{name}_grad", grad)
        return forward.run, backward.run

    def _bind_steps(self, batches, predictions, losses, loss_grad) -> None:
        stash = self._stash_values(batches[0])
        self._records = [
            SplitStep(
                tuple(
                    self._bind_passes(batch, p, {self._output_name: prediction, **stash}, loss_grad)
                    for p in (0, 1)
                ),
                self._bind_loss(batch, prediction, loss, loss_grad).run,
                batch.length,
            )
            for batch, prediction, loss in zip(batches, predictions, losses)
        ]

    def run_epoch(self) -> float:
        updates, penalty_out = self._updates, self._penalty_out
        parity, penalty = self._parity, 0.0
        for passes, run_loss, length in self._records:
            run_forward, run_backward = passes[parity]
            run_forward()
            run_loss()
            run_backward()
            updates[parity].run()
            parity = 1 - parity
            penalty += float(penalty_out) * length
        self._parity = parity
        return self._losses.mean() + penalty / self._n_samples
