"""Forward/backward steps on TrainingAgent (the ort-training backend).

onnxruntime-training's module graph builder turns the model into one forward/backward
graph; a TrainingAgent runs its forward half into a preallocated prediction buffer and,
after the loss graph, its backward half into the step buffers the update reads. A step
allocates only the runtime's partial-execution state, which cannot be reused across steps
(the runtime refuses feeds into a frame that still holds the previous ones).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import onnx

from ..errors import OrtBenchError
from ..gradients.derivative import build_training_graph
from ..gradients.ort_preparation import missing_gradient_kernel
from ..runtime import capi
from ..runtime.sessions import SessionMaker
from .loss_update import LossUpdateSteps


class AgentStep(NamedTuple):
    """What one step of :class:`AgentSteps` runs over one staged batch."""

    #: The forward feeds (X, then the weights of parity 0, then of parity 1).
    forward_in: tuple[capi.OrtValueVector, capi.OrtValueVector]
    #: The forward fetch: the batch's prediction buffer.
    forward_out: capi.OrtValueVector
    #: Runs the loss graph bound to this batch.
    run_loss: Callable[[], None]
    #: The batch's real rows (the last batch may be padded).
    length: int


class AgentSteps(LossUpdateSteps):
    """Forward/backward training steps: TrainingAgent, then ONNX loss and update graphs.

    Takes the parameters of :class:`~ortbench.training.steps.loss_update.LossUpdateSteps`.

    Raises
    ------
    OrtBenchError
        When the gradient graph passes intermediate tensors from forward to backward.
    """

    large_sessions = 1
    #: the backward pass may write into the buffer of the prediction, which it no longer
    #: needs: each step's loss is computed right after its forward pass
    predictions_kept = False

    def _build_passes(self, static: onnx.ModelProto, sessions: SessionMaker) -> dict:
        graph = build_training_graph(static, self.weights)
        if graph.n_forward_outputs != 1:
            raise OrtBenchError(
                "this model's gradient graph passes intermediate tensors from forward to "
                "backward, which ForwardBackwardTrainer does not support: use FullTrainer"
            )
        # the agent does not keep its session alive: this object does
        try:
            self._agent_session = sessions.session(graph.model, "agent")
        except Exception as e:  # onnxruntime's NotImplemented is no RuntimeError
            raise missing_gradient_kernel(e, static) or e from None
        self._agent = capi.TrainingAgent(
            self._agent_session,
            graph.feed_names,
            [self._device],
            graph.grad_names,
            [self._device] * len(graph.grad_names),
            0,
        )
        return {"training": graph.model}

    def _bind_steps(self, batches, predictions, losses, loss_grad) -> None:
        self._grad_fetches = capi.value_vector(self._buffers.grads)
        self._backward_in = capi.value_vector([loss_grad])
        weights = self._buffers.weights
        self._records = [
            AgentStep(
                tuple(capi.value_vector([batch.values[0], *weights[p]]) for p in (0, 1)),
                capi.value_vector([prediction]),
                self._bind_loss(batch, prediction, loss, loss_grad).run,
                batch.length,
            )
            for batch, prediction, loss in zip(batches, predictions, losses)
        ]

    def run_epoch(self) -> float:
        agent, grads, updates = self._agent, self._grad_fetches, self._updates
        backward_in, penalty_out = self._backward_in, self._penalty_out
        new_state = capi.PartialGraphExecutionState
        parity, penalty = self._parity, 0.0
        for forward_in, forward_out, run_loss, length in self._records:
            state = new_state()
            agent.run_forward(forward_in[parity], forward_out, state, None)
            run_loss()
            agent.run_backward(backward_in, grads, state)
            updates[parity].run()
            parity = 1 - parity
            penalty += float(penalty_out) * length
        self._parity = parity
        return self._losses.mean() + penalty / self._n_samples
