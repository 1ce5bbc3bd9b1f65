"""Learning rates and weight updates, with scikit-learn MLP's semantics.

Modelled on scikit-learn's ``neural_network/_stochastic_optimizers.py``: a small object
holds the schedule's state (the current rate ``value``) and says how weights move.
For the forward/backward trainer the update is one fused ONNX graph over all weights
(:meth:`BaseLearningRate.build_onnx_function`); for the full trainer the object names
the on-device optimizer onnxruntime runs.

- ``LearningRateSGD``: w += -lr * g
- ``LearningRateSGDNesterov``: v = m * v - lr * g, then w += m * v - lr * g (Nesterov)
  or w += v (classical momentum); velocities start at zero. The update graph keeps
  q = m * v as its state, which turns Nesterov's update into four nodes:
  s = -lr * g, v = q + s, q = m * v, w = w + q + s.
- ``learning_rate='constant'`` (the default, as in MLPRegressor) keeps eta0;
  ``'invscaling'`` sets lr = eta0 / (t + 1) ** power_t at the end of each epoch, t being
  the number of samples seen so far.
"""

from __future__ import annotations

import onnx
from sklearn.base import BaseEstimator

from .errors import OrtBenchError
from .graph_builder import GraphBuilder
from .penalties import BaseLearningPenalty, NoLearningPenalty

_SCHEDULES = ("constant", "invscaling")


class BaseLearningRate(BaseEstimator):
    """Schedule state shared by every learning rate."""

    #: Tensors of optimizer state kept per weight (velocities...).
    n_states = 0

    def __init__(self, eta0: float = 0.01, learning_rate: str = "constant", power_t: float = 0.25):
        self.eta0 = eta0
        self.learning_rate = learning_rate
        self.power_t = power_t

    def check(self) -> None:
        """Raise a one-line error for invalid hyper-parameters."""
        if not self.eta0 > 0:
            raise OrtBenchError(f"eta0 must be > 0, got {self.eta0}")
        if self.learning_rate not in _SCHEDULES:
            raise OrtBenchError(
                f"learning_rate must be one of {_SCHEDULES}, got {self.learning_rate!r}"
            )

    def init_learning_rate(self) -> BaseLearningRate:
        """Start the schedule: ``value`` is the rate of the first epoch."""
        self.check()
        self.value = float(self.eta0)
        return self

    def update_learning_rate(self, t: int) -> float:
        """End of an epoch after ``t`` samples seen in all: the next epoch's rate."""
        if self.learning_rate == "invscaling":
            self.value = float(self.eta0) / (t + 1) ** self.power_t
        return self.value

    def update_nodes(self, b: GraphBuilder, neg_lr: str, weight: str, grad: str, states: list[str]):
        """Add the nodes updating one weight; return (new weight, new states).

        ``neg_lr`` is the negated learning rate, so a step is one Mul by it.
        """
        raise NotImplementedError

    def build_onnx_function(
        self,
        shapes: dict[str, list],
        penalty: BaseLearningPenalty | None = None,
        penalty_masks: dict | None = None,
    ) -> onnx.ModelProto:
        """One graph updating every weight, the penalty's gradient fused in.

        ``shapes`` names the tensors to update (one flat tensor holding every weight, or
        one per weight). Inputs: ``neg_learning_rate`` (scalar, -lr); for each tensor ``<w>``:
        ``<w>``, ``<w>_grad`` (its loss gradient), then ``<w>_state<k>`` for each optimizer
        state. Outputs: ``<w>_new`` and ``<w>_state<k>_new`` for each tensor, then
        ``penalty`` (scalar) when the penalty is active. ``penalty_masks[w]`` says what
        the penalty applies to: True (all), False (nothing, e.g. a bias) or a 0/1 array
        (coefficients inside a flat tensor); all by default.
        """
        penalty = penalty or NoLearningPenalty()
        masks = penalty_masks or {}
        b = GraphBuilder(f"update_{type(self).__name__}")
        neg_lr = b.input("neg_learning_rate", [])
        penalties = []
        for name, shape in shapes.items():
            weight = b.input(name, shape)
            grad = b.input(f"{name}_grad", shape)
            states = [b.input(f"{name}_state{k}", shape) for k in range(self.n_states)]
            mask = masks.get(name, True)
            if penalty.is_active() and mask is not False:
                penalised = weight if mask is True else b.op("Mul", weight, b.const(mask))
                grad = penalty.gradient_nodes(b, penalised, grad)
                penalties.append(penalty.penalty_nodes(b, penalised))
            new_weight, new_states = self.update_nodes(b, neg_lr, weight, grad, states)
            b.output(b.rename(new_weight, f"{name}_new"), shape)
            for k, state in enumerate(new_states):
                b.output(b.rename(state, f"{name}_state{k}_new"), shape)
        if penalties:
            b.output(b.add_all(penalties, name="penalty"), [])
        return b.to_model()


class LearningRateSGD(BaseLearningRate):
    """Plain stochastic gradient descent: w += -lr * g."""

    def update_nodes(self, b, neg_lr, weight, grad, states):
        return b.op("Add", weight, b.op("Mul", grad, neg_lr)), []


class LearningRateSGDNesterov(BaseLearningRate):
    """SGD with momentum, Nesterov's by default, as MLPRegressor(solver='sgd') runs it."""

    n_states = 1

    def __init__(
        self,
        eta0: float = 0.01,
        learning_rate: str = "constant",
        power_t: float = 0.25,
        momentum: float = 0.9,
        nesterov: bool = True,
    ):
        super().__init__(eta0=eta0, learning_rate=learning_rate, power_t=power_t)
        self.momentum = momentum
        self.nesterov = nesterov

    def check(self) -> None:
        super().check()
        if not 0 <= self.momentum < 1:
            raise OrtBenchError(f"momentum must be in [0, 1), got {self.momentum}")

    def update_nodes(self, b, neg_lr, weight, grad, states):
        # states[0] holds q = momentum * velocity
        step = b.op("Mul", grad, neg_lr)
        velocity = b.op("Add", states[0], step)
        scaled = b.op("Mul", velocity, b.const(self.momentum))
        if self.nesterov:
            return b.op("Sum", weight, scaled, step), [scaled]
        return b.op("Add", weight, velocity), [scaled]


class LearningRateAdamW(BaseLearningRate):
    """AdamW as onnxruntime's on-device optimizer runs it (full training only)."""

    def __init__(
        self,
        eta0: float = 0.001,
        learning_rate: str = "constant",
        power_t: float = 0.25,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        weight_decay: float = 0.01,
    ):
        super().__init__(eta0=eta0, learning_rate=learning_rate, power_t=power_t)
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.weight_decay = weight_decay

    def update_nodes(self, b, neg_lr, weight, grad, states):
        raise OrtBenchError(
            "LearningRateAdamW runs only in FullTrainer (onnxruntime's own AdamW optimizer)"
        )
