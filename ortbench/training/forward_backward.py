"""Forward/backward training: TrainingAgent for the model, small ONNX graphs for the rest.

One step runs four onnxruntime calls: forward (TrainingAgent), loss and its gradient
(loss graph), backward (TrainingAgent), and one fused update of every weight with the
penalty's gradient folded in. Weights and optimizer states are double-buffered: the
update reads buffer A and writes buffer B, the next step the reverse, so both update
bindings are made once and only the gradients (fresh OrtValues from the backward pass)
are rebound, and only when their address changes.
"""

from __future__ import annotations

import numpy as np
from onnxruntime.capi import _pybind_state as C

from .base import BaseTrainer
from .data import BatchLoader
from .derivative import build_training_graph
from .errors import OrtBenchError
from .graph_tools import bias_names, get_initializers
from .iobinding import CachedBinding, make_session
from .learning_rates import BaseLearningRate, LearningRateAdamW
from .losses import BaseLearningLoss, SquareLearningLoss
from .penalties import BaseLearningPenalty, NoLearningPenalty
from .runtime import cpu_scalar, ort_device


class ForwardBackwardTrainer(BaseTrainer):
    """Train an ONNX model with TrainingAgent's forward/backward and ONNX update graphs.

    Parameters follow scikit-learn's conventions: ``learning_loss`` (default
    :class:`SquareLearningLoss`), ``learning_penalty`` (default none) and
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

    def _learning_loss(self) -> BaseLearningLoss:
        return self.learning_loss or SquareLearningLoss()

    def _penalty(self) -> BaseLearningPenalty:
        return self.learning_penalty or NoLearningPenalty()

    # -- graphs and sessions, once per model ----------------------------------------------

    def _build(self) -> None:
        if isinstance(self.learning_rate_, LearningRateAdamW):
            raise OrtBenchError("LearningRateAdamW runs only in FullTrainer")
        device, providers = ort_device(self.device), self._providers()
        self._ort_device = device
        graph = build_training_graph(self._train_model, self.weights_)
        self._training_graph = graph
        session = make_session(graph.model, self._session_options("agent"), providers)
        self._agent = C.TrainingAgent(
            session,
            graph.feed_names,
            [device] * graph.n_forward_outputs,
            graph.grad_names,
            [device] * len(graph.grad_names),
            0,
        )
        self._agent_session = session
        loss = self._learning_loss()
        self._loss_models = {w: loss.build_onnx_function(weighted=w) for w in (False, True)}
        self._loss_sessions = {
            w: make_session(
                m.SerializeToString(), self._session_options(f"loss{int(w)}"), providers
            )
            for w, m in self._loss_models.items()
        }
        initial = get_initializers(self._train_model, self.weights_)
        shapes = {name: list(value.shape) for name, value in initial.items()}
        penalty = self._penalty()
        biases = bias_names(self._train_model, self.weights_)
        self._update_model = self.learning_rate_.build_onnx_function(shapes, penalty, biases)
        update = make_session(
            self._update_model.SerializeToString(), self._session_options("update"), providers
        )
        n_states = self.learning_rate_.n_states
        # buffers[p][i]: weight i then its states, in parity p
        self._buffers = [
            [self._new_value(initial[n]) for n in self.weights_],
            [self._new_value(initial[n]) for n in self.weights_],
        ]
        self._states = [
            [
                [self._new_value(np.zeros_like(initial[n])) for _ in range(n_states)]
                for n in self.weights_
            ]
            for _ in range(2)
        ]
        self._lr = np.zeros((), dtype=np.float32)
        self._loss_out = np.zeros((), dtype=np.float32)
        self._penalty_out = np.zeros((), dtype=np.float32)
        self._has_penalty = any(o.name == "penalty" for o in self._update_model.graph.output)
        self._updates = [self._bind_update(update, p, 1 - p) for p in (0, 1)]
        self._grad_inputs = [f"{n}_grad" for n in self.weights_]
        self._parity = 0

    def _new_value(self, array: np.ndarray) -> C.OrtValue:
        """An OrtValue owning a copy of ``array`` on the trainer's device."""
        if not hasattr(self, "_host_arrays"):
            self._host_arrays = []
        if self._ort_device.device_type() == C.OrtDevice.cpu():
            host = np.array(array, dtype=np.float32, copy=True)
            self._host_arrays.append(host)  # the OrtValue views this memory
            return C.OrtValue.ortvalue_from_numpy(host, self._ort_device)
        return C.OrtValue.ortvalue_from_numpy(
            np.ascontiguousarray(array, np.float32), self._ort_device
        )

    def _bind_update(self, session, src: int, dst: int) -> CachedBinding:
        """The update binding reading parity ``src`` and writing parity ``dst``."""
        binding = CachedBinding(session)
        binding.bind_input("learning_rate", cpu_scalar(self._lr))
        for i, name in enumerate(self.weights_):
            binding.bind_input(name, self._buffers[src][i])
            binding.bind_output(f"{name}_new", self._buffers[dst][i])
            for k, state in enumerate(self._states[src][i]):
                binding.bind_input(f"{name}_state{k}", state)
                binding.bind_output(f"{name}_state{k}_new", self._states[dst][i][k])
        if self._has_penalty:
            binding.bind_output("penalty", cpu_scalar(self._penalty_out))
        return binding

    def _set_learning_rate(self, value: float) -> None:
        self._lr[()] = value  # bound once: the update reads this memory every step

    # -- per fit --------------------------------------------------------------------------

    def _start_fit(self, loader: BatchLoader) -> None:
        batches = loader.batches
        weighted = len(batches[0].values) == 3
        self._loss_binding = CachedBinding(self._loss_sessions[weighted])
        self._loss_binding.bind_output("loss", cpu_scalar(self._loss_out))
        columns = batches[0].values[1].shape()[1]
        self._grad_out = {}
        self._backward_feeds = {}
        for length in {b.length for b in batches}:
            grad = self._new_value(np.zeros((length, columns), np.float32))
            feeds = C.OrtValueVector()
            feeds.push_back(grad)
            self._grad_out[length] = grad
            self._backward_feeds[length] = feeds
        # forward feeds per parity and batch: X then the weights of that parity
        self._forward_feeds = [[self._feeds(b.values[0], p) for b in batches] for p in (0, 1)]

    def _feeds(self, x: C.OrtValue, parity: int) -> C.OrtValueVector:
        feeds = C.OrtValueVector()
        feeds.push_back(x)
        for value in self._buffers[parity]:
            feeds.push_back(value)
        return feeds

    def _run_epoch(self, batches) -> float:
        agent, loss, loss_out = self._agent, self._loss_binding, self._loss_out
        grad_names, penalty_out, has_penalty = (
            self._grad_inputs,
            self._penalty_out,
            self._has_penalty,
        )
        parity, total = self._parity, 0.0
        for k, batch in enumerate(batches):
            values, length = batch.values, batch.length
            forward_out = C.OrtValueVector()
            state = C.PartialGraphExecutionState()
            agent.run_forward(self._forward_feeds[parity][k], forward_out, state, None)
            loss.bind_input("predicted", forward_out[0])
            loss.bind_input("expected", values[1])
            if len(values) == 3:
                loss.bind_input("weight", values[2])
            loss.bind_output("loss_grad", self._grad_out[length])
            loss.run()
            grads = C.OrtValueVector()
            agent.run_backward(self._backward_feeds[length], grads, state)
            update = self._updates[parity]
            for i, name in enumerate(grad_names):
                update.bind_input(name, grads[i])
            update.run()
            parity = 1 - parity
            total += (float(loss_out) + (float(penalty_out) if has_penalty else 0.0)) * length
        self._parity = parity
        return total / sum(b.length for b in batches)

    # -- state ----------------------------------------------------------------------------

    def get_state(self) -> dict[str, np.ndarray]:
        self._check_built()
        # OrtValue.numpy() may view the buffer: copy so the state outlives the trainer
        return {n: v.numpy().copy() for n, v in zip(self.weights_, self._buffers[self._parity])}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self._check_built()
        current = dict(zip(self.weights_, self._buffers[self._parity]))
        for name, array in state.items():
            if name not in current:
                raise OrtBenchError(f"unknown weight {name!r}: trained weights are {self.weights_}")
            expected = tuple(current[name].shape())
            array = np.ascontiguousarray(array, dtype=np.float32)
            if array.shape != expected:
                raise OrtBenchError(f"weight {name!r} has shape {expected}, got {array.shape}")
            current[name].update_inplace(array)
        self._predictor = None

    def _check_built(self) -> None:
        if not hasattr(self, "_buffers"):
            raise OrtBenchError(f"this {type(self).__name__} is not fitted yet: call fit first")

    def _graphs(self) -> dict:
        graphs = {
            "training": self._training_graph.model,
            "loss": self._loss_models[False],
            "loss_weighted": self._loss_models[True],
            "update": self._update_model,
        }
        return graphs


OrtGradientForwardBackwardOptimizer = ForwardBackwardTrainer
