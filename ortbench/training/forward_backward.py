"""Forward/backward training: TrainingAgent for the model, small ONNX graphs for the rest.

With ``backend='portable'`` a forward graph and a gradient graph of standard operators
(:mod:`ortbench.training.portable`) replace TrainingAgent, on any onnxruntime build.

One step runs four onnxruntime calls: forward (TrainingAgent), loss and its gradient
(loss graph), backward (TrainingAgent), and one fused update of every weight with the
penalty's gradient folded in. The loss graph scales the gradient it back-propagates by
the optimizer's step factor (-lr for SGD), so the backward pass yields the step ``e``
and the update is ``w + e`` for SGD, or two matrix-vector products over the stacked
weight, state and step with momentum (see ``learning_rates.py`` and ``weights.py``).

Every buffer a step touches is allocated and bound before the first step: TrainingAgent
writes its outputs into preallocated fetches, the loss graph has one binding per batch,
and weights and optimizer states are double-buffered (a step reads buffer A and writes
buffer B, the next step the reverse), so a step binds nothing and allocates only the
runtime's partial-execution state.
"""

from __future__ import annotations

import numpy as np
from onnxruntime.capi import _pybind_state as C

from .base import BaseTrainer
from .data import BatchLoader
from .derivative import build_training_graph
from .errors import OrtBenchError
from .graph_tools import bias_names, get_initializers, weights_as_inputs
from .iobinding import CachedBinding, make_session
from .learning_rates import BaseLearningRate, LearningRateAdamW
from .losses import BaseLearningLoss
from .penalties import BaseLearningPenalty, NoLearningPenalty
from .portable import split_forward_backward
from .runtime import cpu_scalar, ort_device
from .weights import WeightBuffers


class ForwardBackwardTrainer(BaseTrainer):
    """Train an ONNX model with TrainingAgent's forward/backward and ONNX update graphs.

    Parameters follow scikit-learn's conventions: ``learning_loss`` (default
    :class:`NegLogLearningLoss` for a classifier graph, else :class:`SquareLearningLoss`), ``learning_penalty`` (default none) and
    ``learning_rate`` (default ``LearningRateSGD()``; ``LearningRateSGDNesterov`` for
    momentum) are estimator-like objects, tunable by GridSearchCV as
    ``learning_rate__eta0``.
    """

    def __init__(
        self,
        model_onnx=None,
        weights_to_train: list[str] | None = None,
        learning_loss: BaseLearningLoss | None = None,
        learning_penalty: BaseLearningPenalty | None = None,
        learning_rate: BaseLearningRate | None = None,
        batch_size: int = 10,
        max_iter: int = 100,
        device: str = "cpu",
        shuffle: bool = True,
        random_state=None,
        warm_start: bool = False,
        verbose: int = 0,
        validation_every: int = 1,
        intra_op_threads="auto",
        backend: str | None = None,
    ):
        self.model_onnx = model_onnx
        self.weights_to_train = weights_to_train
        self.learning_loss = learning_loss
        self.learning_penalty = learning_penalty
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.device = device
        self.shuffle = shuffle
        self.random_state = random_state
        self.warm_start = warm_start
        self.verbose = verbose
        self.validation_every = validation_every
        self.intra_op_threads = intra_op_threads
        self.backend = backend

    def _learning_loss(self) -> BaseLearningLoss | None:
        loss = self.learning_loss
        if loss is not None and not isinstance(loss, BaseLearningLoss):
            raise OrtBenchError(
                f"learning_loss must be a BaseLearningLoss object such as "
                f"NegLogLearningLoss(), got {type(loss).__name__} {loss!r}"
            )
        if loss is not None:
            loss.check()
        return loss

    def _penalty(self) -> BaseLearningPenalty:
        penalty = self.learning_penalty
        if penalty is not None and not isinstance(penalty, BaseLearningPenalty):
            raise OrtBenchError(
                f"learning_penalty must be a BaseLearningPenalty object such as "
                f"ElasticLearningPenalty(l1=0, l2=1e-4), got {type(penalty).__name__} {penalty!r}"
            )
        penalty = penalty or NoLearningPenalty()
        penalty.check()
        return penalty

    # -- graphs and sessions, once per model ----------------------------------------------

    def _build(self) -> None:
        if isinstance(self.learning_rate_, LearningRateAdamW):
            raise OrtBenchError("LearningRateAdamW runs only in FullTrainer")
        device, providers = ort_device(self.device), self._providers()
        self._ort_device = device
        static = self._static_batch(self._train_model)
        if self._backend == "portable":
            self._build_portable(static, providers)
        else:
            self._build_agent(static, device, providers)
        rate, penalty = self.learning_rate_, self._penalty()
        initial = get_initializers(self._train_model, self.weights_)
        biases = bias_names(self._train_model, self.weights_)
        buffers = WeightBuffers(initial, rate.n_states, device, biases)
        self._weights = buffers
        self._loss_model = self.learning_loss_.build_onnx_function()
        self._loss_session = make_session(
            self._loss_model.SerializeToString(), self._session_options("loss"), providers
        )
        self._stacked = buffers.on_cpu and buffers.has_state and not penalty.is_active()
        if self._stacked:
            (size,) = buffers.group_shapes["weights"]
            self._update_model = rate.build_stacked_function(size)
            self._coefficients = buffers.stacked_coefficients(*rate.state_coefficients())
        else:
            self._update_model = rate.build_onnx_function(
                buffers.group_shapes, penalty, buffers.penalty_masks
            )
        update = make_session(
            self._update_model.SerializeToString(), self._session_options("update"), providers
        )
        self._step_scale = np.zeros((), dtype=np.float32)
        self._loss_out = np.zeros((), dtype=np.float32)
        self._penalty_out = np.zeros((), dtype=np.float32)
        self._grad_fetches = _vector(buffers.grads)
        self._updates = [self._bind_update(update, p, 1 - p) for p in (0, 1)]
        self._parity = 0

    def _build_agent(self, static, device, providers) -> None:
        """TrainingAgent over onnxruntime-training's forward/backward graph."""
        graph = build_training_graph(static, self.weights_)
        if graph.n_forward_outputs != 1:
            raise OrtBenchError(
                "this model's gradient graph passes intermediate tensors from forward to "
                "backward, which ForwardBackwardTrainer does not support: use FullTrainer"
            )
        session = make_session(graph.model, self._session_options("agent"), providers)
        self._agent = C.TrainingAgent(
            session,
            graph.feed_names,
            [device] * graph.n_forward_outputs,
            graph.grad_names,
            [device] * len(graph.grad_names),
            0,
        )
        self._agent_session = session  # the agent does not keep its session alive
        self._model_graphs = {"training": graph.model}

    def _build_portable(self, static, providers) -> None:
        """Two sessions of standard operators: the forward pass, which also outputs the
        intermediate values the gradient graph reads (the stash), and the gradient graph.
        """
        self._agent = None
        model = weights_as_inputs(static, self.weights_)
        forward, backward, self._stash = split_forward_backward(model, self.weights_)
        self._stash_buffers = None  # allocated by the first forward run (_stash_values)
        self._backward_inputs = {i.name for i in backward.graph.input}
        self._model_graphs = {"forward": forward, "backward": backward}
        self._portable_sessions = [
            make_session(m.SerializeToString(), self._session_options(name), providers)
            for name, m in self._model_graphs.items()
        ]

    def _new_value(self, array: np.ndarray) -> C.OrtValue:
        """An OrtValue owning a copy of ``array`` on the trainer's device."""
        if self._ort_device.device_type() == C.OrtDevice.cpu():
            host = np.array(array, dtype=np.float32, copy=True)
            self._host_arrays.append(host)  # the OrtValue views this memory
            return C.OrtValue.ortvalue_from_numpy(host, self._ort_device)
        return C.OrtValue.ortvalue_from_numpy(
            np.ascontiguousarray(array, np.float32), self._ort_device
        )

    def _bind_update(self, session, src: int, dst: int) -> CachedBinding:
        """The update binding reading parity ``src`` and writing parity ``dst``."""
        buffers = self._weights
        binding = CachedBinding(session)
        if self._stacked:
            rows, state_rows, new_weight, new_state = buffers.stacked[src]
            binding.bind_input("weight_state_step", rows)
            binding.bind_input("state_step", state_rows)
            binding.bind_input("state_coefficients", cpu_scalar(self._coefficients[src]))
            binding.bind_output("weight_new", new_weight)
            binding.bind_output("state_new", new_state)
            return binding
        if any(i.name == "step_scale" for i in self._update_model.graph.input):
            binding.bind_input("step_scale", cpu_scalar(self._step_scale))
        for i, name in enumerate(buffers.group_shapes):
            binding.bind_input(name, buffers.group_weights[src][i])
            binding.bind_input(f"{name}_step", buffers.group_grads[i])
            binding.bind_output(f"{name}_new", buffers.group_weights[dst][i])
            if buffers.has_state:
                binding.bind_input(f"{name}_state", buffers.states[src][i])
                binding.bind_output(f"{name}_state_new", buffers.states[dst][i])
        if any(o.name == "penalty" for o in self._update_model.graph.output):
            binding.bind_output("penalty", cpu_scalar(self._penalty_out))
        return binding

    def _set_learning_rate(self, value: float) -> None:
        factor = self.learning_rate_.step_factor(value)
        self._step_scale[()] = factor  # bound once: the update reads this memory
        loader = getattr(self, "_loader", None)
        if loader is not None:
            loader.set_gradient_factor(factor)

    # -- per fit --------------------------------------------------------------------------

    def _start_fit(self, loader: BatchLoader) -> None:
        """Bind everything a step touches, once: a step then only runs.

        TrainingAgent writes into preallocated fetches, so the forward pass fills one
        prediction buffer (every batch has batch_size rows) and the backward pass fills the
        gradient buffers the update graph was bound to at build time.
        """
        loader.set_gradient_factor(float(self._step_scale))
        batches = loader.batches
        shape = tuple(batches[0].values[1].shape())  # every batch has batch_size rows
        self._host_arrays = []
        prediction = self._new_value(np.zeros(shape, np.float32))
        loss_grad = self._new_value(np.zeros(shape, np.float32))
        forward_out, backward_in = _vector([prediction]), _vector([loss_grad])
        if self._agent is None:
            stash = self._stash_values(batches[0], prediction)
        self._steps = []
        for batch in batches:
            loss = CachedBinding(self._loss_session)
            loss.bind_input("predicted", prediction)
            loss.bind_input("expected", batch.values[1])
            loss.bind_input("loss_scale", batch.loss_scale)
            loss.bind_input("grad_scale", batch.grad_scale)
            loss.bind_output("loss", cpu_scalar(self._loss_out))
            loss.bind_output("loss_grad", loss_grad)
            if self._agent is None:
                passes = [self._bind_passes(batch, p, stash, loss_grad) for p in (0, 1)]
                self._steps.append((passes, loss.run, batch.length))
                continue
            forward_in = [_vector([batch.values[0], *self._weights.weights[p]]) for p in (0, 1)]
            self._steps.append((forward_in, forward_out, loss.run, backward_in, batch.length))

    def _stash_values(self, batch, prediction) -> dict[str, C.OrtValue]:
        """The prediction and the buffers the forward pass hands to the backward pass,
        allocated by onnxruntime in one forward run (their shapes are then known)."""
        if self._stash_buffers is None:
            binding = CachedBinding(self._portable_sessions[0])
            binding.bind_input(self._input.name, batch.values[0])
            for name, value in zip(self.weights_, self._weights.weights[self._parity]):
                binding.bind_input(name, value)
            names = [self.output_name_, *(n for n in self._stash if n != self.output_name_)]
            for name in names:
                binding.binding.bind_output(name, self._ort_device)
            binding.run()
            self._stash_buffers = dict(zip(names[1:], list(binding.binding.get_outputs())[1:]))
        return {self.output_name_: prediction, **self._stash_buffers}

    def _bind_passes(self, batch, parity: int, stash: dict, loss_grad) -> tuple:
        """The portable forward and backward runs of one batch reading weights ``parity``."""
        forward, backward = (CachedBinding(s) for s in self._portable_sessions)
        values = {
            self._input.name: batch.values[0],
            **dict(zip(self.weights_, self._weights.weights[parity])),
        }
        for name, value in values.items():
            forward.bind_input(name, value)
        for name, value in stash.items():
            forward.bind_output(name, value)
        values.update(stash)
        for name in self._backward_inputs - {f"{self.output_name_}_grad"}:
            backward.bind_input(name, values[name])
        backward.bind_input(f"{self.output_name_}_grad", loss_grad)
        for name, grad in zip(self.weights_, self._weights.grads):
            backward.bind_output(f"{name}_grad", grad)
        return forward.run, backward.run

    def _run_epoch(self, batches) -> float:
        if self._agent is None:
            return self._run_portable_epoch()
        agent, grads, updates = self._agent, self._grad_fetches, self._updates
        loss_out, penalty_out = self._loss_out, self._penalty_out
        parity, total, count = self._parity, 0.0, 0
        for forward_in, forward_out, run_loss, backward_in, length in self._steps:
            state = C.PartialGraphExecutionState()
            agent.run_forward(forward_in[parity], forward_out, state, None)
            run_loss()
            agent.run_backward(backward_in, grads, state)
            updates[parity].run()
            parity = 1 - parity
            total += (float(loss_out) + float(penalty_out)) * length
            count += length
        self._parity = parity
        return total / count

    def _run_portable_epoch(self) -> float:
        updates, loss_out, penalty_out = self._updates, self._loss_out, self._penalty_out
        parity, total, count = self._parity, 0.0, 0
        for passes, run_loss, length in self._steps:
            run_forward, run_backward = passes[parity]
            run_forward()
            run_loss()
            run_backward()
            updates[parity].run()
            parity = 1 - parity
            total += (float(loss_out) + float(penalty_out)) * length
            count += length
        self._parity = parity
        return total / count

    # -- state ----------------------------------------------------------------------------

    def get_state(self) -> dict[str, np.ndarray]:
        self._check_built()
        return self._weights.get(self._parity)

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self._check_built()
        for name, array in state.items():
            if name not in self.weights_:
                raise OrtBenchError(f"unknown weight {name!r}: trained weights are {self.weights_}")
            if not np.isfinite(array).all():
                raise OrtBenchError(f"weight {name!r} contains NaN or infinity")
            expected = self._weights.shape(name)
            if np.shape(array) != expected:
                raise OrtBenchError(f"weight {name!r} has shape {expected}, got {np.shape(array)}")
            self._weights.set(self._parity, name, array)
        self._predictor = None

    def _optimizer_state(self) -> list[np.ndarray] | None:
        self._check_built()
        return self._weights.get_states(self._parity) if self._weights.has_state else None

    def _set_optimizer_state(self, arrays: list[np.ndarray]) -> None:
        self._check_built()
        self._weights.set_states(self._parity, arrays)

    def _check_built(self) -> None:
        self._restore_pickled()
        if not hasattr(self, "_weights"):
            raise OrtBenchError(f"this {type(self).__name__} is not fitted yet: call fit first")

    def _graphs(self) -> dict:
        graphs = {
            **self._model_graphs,
            "loss": self._loss_model,
            "update": self._update_model,
        }
        return graphs


OrtGradientForwardBackwardOptimizer = ForwardBackwardTrainer


def _vector(values: list) -> C.OrtValueVector:
    vector = C.OrtValueVector()
    for value in values:
        vector.push_back(value)
    return vector
