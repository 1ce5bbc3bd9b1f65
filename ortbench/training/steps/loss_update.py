"""The loss and update runs of forward/backward training, which both of its backends share.

A forward/backward step is four runs: forward, the loss graph (loss and its gradient),
backward, and one fused update of every weight with the penalty's gradient folded in.
The loss graph scales the gradient it back-propagates by the optimizer's step factor
(-lr for SGD; the loader stages it as each batch's gradient-scale column), so the
backward pass yields the step ``e`` and the update is ``w + e`` for SGD, or two
matrix-vector products over the stacked weight, state and step with momentum (see
:mod:`ortbench.training.learning_rates` and :mod:`.buffers`).

:class:`LossUpdateSteps` owns what does not depend on how forward and backward run: the
weights (double-buffered: a step reads parity A and writes parity B, the next step the
reverse), the loss graph bound once per staged batch, the update graph bound once per
parity, and the host scalars the runs write the loss and penalty into. Its subclasses,
:class:`~ortbench.training.steps.agent.AgentSteps` (TrainingAgent) and
:class:`~ortbench.training.steps.split.SplitSteps` (portable sessions), add forward and
backward and the loop of an epoch.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import onnx

from ..graphs.loading import fit_runtime
from ..graphs.outputs import static_width
from ..graphs.weights import get_initializers
from ..learning_rates import BaseLearningRate
from ..losses import BaseLearningLoss
from ..penalties import BaseLearningPenalty
from ..runtime import capi
from ..runtime.devices import ScalarInput, cpu_scalar
from ..runtime.sessions import SessionMaker
from .batch_losses import BatchLosses
from .batches import Batch, BatchLoader
from .buffers import DoubleBufferedSteps, WeightBuffers


class LossUpdateSteps(DoubleBufferedSteps):
    """Weights, loss graph and update graph of forward/backward training steps.

    Parameters
    ----------
    static : onnx.ModelProto
        The model with a static batch dimension, its one data input first and one
        output; its initializers hold the weights' starting values.
    weights : list of str
        The trained weights, in the order the graphs read them.
    biases : set of str
        The weights the penalty leaves alone.
    loss : BaseLearningLoss
        Builds the loss graph.
    penalty : BaseLearningPenalty
        Folded into the update graph.
    rate : BaseLearningRate
        Builds the update graph; its step factor scales the back-propagated gradient.
    sessions : SessionMaker
        Device, threads and labels of the sessions.

    Raises
    ------
    OrtBenchError
        When the backend cannot run forward and backward of this model.
    """

    #: Whether each batch's prediction stays as the forward pass wrote it until the epoch
    #: ends, so that the losses can be computed after the epoch (on the CPU).
    predictions_kept: ClassVar[bool]

    def __init__(
        self,
        static: onnx.ModelProto,
        weights: list[str],
        biases: set[str],
        loss: BaseLearningLoss,
        penalty: BaseLearningPenalty,
        rate: BaseLearningRate,
        sessions: SessionMaker,
    ):
        self.weights = weights
        self._device = sessions.ort_device
        graphs = self._build_passes(static, sessions)
        buffers = WeightBuffers(
            get_initializers(static, weights), rate.n_states, self._device, biases
        )
        self._buffers = buffers
        # on the CPU, where the predictions stay as the forward pass wrote them, the loss
        # graph computes the gradient only, and the losses are computed after the epoch;
        # elsewhere it computes the loss too, (1, 1) where the prediction's width is known
        # (no node then reduces it to a scalar)
        after_epoch = buffers.on_cpu and self.predictions_kept
        width = static_width(static, static.graph.output[0].name)
        # one-row batches: the gradient of a loss linear in the labels is one product
        # with the labels the loader scales (see BaseLearningLoss.build_onnx_function)
        rows = static.graph.input[0].type.tensor_type.shape.dim[0].dim_value
        self._scaled = after_epoch and rows == 1 and loss.derivative_slope() is not None
        loss_model = loss.build_onnx_function(width, after_epoch, self._scaled)
        self._loss_session = sessions.session(
            fit_runtime(loss_model).SerializeToString(), "loss", one_thread=True
        )
        dims = loss_model.graph.output[0].type.tensor_type.shape.dim
        shape = [d.dim_value for d in dims]  # the loss's, unless after_epoch
        self._losses = BatchLosses(loss if after_epoch else None, shape, sessions)
        self._rate = rate
        self._step_scale = ScalarInput(sessions.ort_device)
        self._penalty_out = np.zeros((), dtype=np.float32)
        if buffers.on_cpu and buffers.has_state and not penalty.is_active():
            update_model, self._update_session, self._updates = buffers.stacked_update(
                rate, sessions
            )
        else:
            update_model = rate.build_onnx_function(
                buffers.group_shapes, penalty, buffers.penalty_masks
            )
            self._update_session = sessions.session(
                fit_runtime(update_model).SerializeToString(), "update", one_thread=True
            )
            self._updates = [
                self._bind_update(self._update_session, update_model, p) for p in (0, 1)
            ]
        self.graphs = {**graphs, "loss": loss_model, "update": update_model, **self._losses.graphs}
        self._parity = 0
        self._loader: BatchLoader | None = None

    def _build_passes(self, static: onnx.ModelProto, sessions: SessionMaker) -> dict:
        """Build forward and backward; return their graphs by name."""
        raise NotImplementedError

    def _bind_update(self, session, model: onnx.ModelProto, src: int) -> capi.Binding:
        """The update reading parity ``src`` and writing the other one."""
        buffers, dst = self._buffers, 1 - src
        binding = capi.Binding(session)
        if any(i.name == "step_scale" for i in model.graph.input):
            binding.bind_input("step_scale", self._step_scale.value)
        for i, name in enumerate(buffers.group_shapes):
            binding.bind_input(name, buffers.group_weights[src][i])
            binding.bind_input(f"{name}_step", buffers.group_grads[i])
            binding.bind_output(f"{name}_new", buffers.group_weights[dst][i])
            if buffers.has_state:
                binding.bind_input(f"{name}_state", buffers.states[src][i])
                binding.bind_output(f"{name}_state_new", buffers.states[dst][i])
        if any(o.name == "penalty" for o in model.graph.output):
            binding.bind_output("penalty", cpu_scalar(self._penalty_out))
        return binding

    def set_learning_rate(self, value: float) -> None:
        """Make the next steps use the learning rate ``value``."""
        factor = self._rate.step_factor(value)
        self._step_scale.set(factor)  # bound once, read by every update
        if self._loader is not None:
            self._loader.set_gradient_factor(factor)

    def start_fit(self, loader: BatchLoader) -> None:
        """Bind every run of every staged batch, once: a step then only runs.

        The forward pass fills a prediction buffer (every batch has ``batch_size`` rows:
        one buffer for all, or each batch's slot where the losses are computed after the
        epoch), the loss graph reads it and fills one buffer with the loss's gradient, which
        the backward pass reads; the backward pass writes the step buffers the update
        graph was bound to when it was built.
        """
        self._loader = loader
        loader.set_gradient_factor(float(self._step_scale))
        if self._scaled:
            loader.stage_scaled_labels()
        batches = loader.batches
        shape = tuple(batches[0].values[1].shape())
        self._hosts: list[np.ndarray] = []  # the memory the OrtValues below view
        slots, loss_grad = self._losses.bind(loader), self._zeros(shape)
        if self._losses.after_epoch:
            predictions, losses = slots, [None] * len(batches)
        else:
            predictions, losses = [self._zeros(shape)] * len(batches), slots
        self._n_samples = loader.n_samples
        self._bind_steps(batches, predictions, losses, loss_grad)

    def _bind_steps(
        self,
        batches: list[Batch],
        predictions: list[capi.OrtValue],
        losses: list[capi.OrtValue | None],
        loss_grad: capi.OrtValue,
    ) -> None:
        """Bind forward and backward of every batch (batch ``k`` predicts into
        ``predictions[k]``, its loss goes to ``losses[k]``); make ``_records``, one step
        record per batch, which :meth:`run_epoch` iterates over."""
        raise NotImplementedError

    def _bind_loss(
        self,
        batch: Batch,
        prediction: capi.OrtValue,
        loss_out: capi.OrtValue | None,
        loss_grad: capi.OrtValue,
    ) -> capi.Binding:
        """The loss graph's run over one staged batch (its loss into ``loss_out``, unless
        the losses are computed after the epoch)."""
        loss = capi.Binding(self._loss_session)
        loss.bind_input("predicted", prediction)
        if self._scaled:
            loss.bind_input("scaled_expected", batch.scaled_label)
        else:
            loss.bind_input("expected", batch.values[1])
        loss.bind_input("grad_scale", batch.grad_scale)
        if loss_out is not None:
            loss.bind_input("loss_scale", batch.loss_scale)
            loss.bind_output("loss", loss_out)
        loss.bind_output("loss_grad", loss_grad)
        return loss

    def _zeros(self, shape: tuple) -> capi.OrtValue:
        """An OrtValue owning zeros of ``shape`` on the device."""
        host = np.zeros(shape, np.float32)
        if self._buffers.on_cpu:
            self._hosts.append(host)  # the OrtValue views this memory
        return capi.OrtValue.ortvalue_from_numpy(host, self._device)

    def run_epoch(self) -> float:
        """Train on every staged batch; return the epoch's loss (mean over samples)."""
        raise NotImplementedError
