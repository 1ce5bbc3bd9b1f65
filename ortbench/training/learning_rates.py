"""Learning rates and weight updates, with scikit-learn MLP's semantics.

Modelled on scikit-learn's ``neural_network/_stochastic_optimizers.py``: a small object
holds the schedule's state (the current rate ``value``) and says how weights move. For
the full trainer on onnxruntime-training the object names the on-device optimizer.

Every rate of the SGD family moves weights the same way, written so that a step makes
as few passes over the weights as possible:

- the step ``e = -lr * gradient_scale * g`` (the loss graph already scales the gradient
  it back-propagates, so no node computes it);
- ``w_new = w + s + e``, ``s`` being the optimizer state (none for plain SGD);
- ``s_new = c_s * s + c_e * e``, ``(c_s, c_e)`` being :meth:`state_coefficients`.

With momentum ``m`` and scikit-learn's velocity ``v`` (``v_new = m * v - lr * g``):

- ``LearningRateSGD``: ``w += -lr * g``; no state.
- ``LearningRateSGDNesterov`` (``nesterov=True``): ``w += m * v_new - lr * g`` is
  ``w + m^2 * v + (1 + m) * (-lr * g)``, so ``s = m^2 * v``, ``gradient_scale = 1 + m``
  and ``s_new = m * s + m^2 / (1 + m) * e``.
- Classical momentum (``nesterov=False``): ``w += v_new`` is ``w + m * v - lr * g``, so
  ``s = m * v``, ``gradient_scale = 1`` and ``s_new = m * s + m * e``.

On CPU the forward/backward trainer stores a flat weight, state and step side by side,
so its update is two matrix-vector products over adjacent rows (see
:meth:`BaseLearningRate.build_stacked_function`), where element-wise nodes would make
five passes.

``learning_rate='constant'`` (the default, as in MLPRegressor) keeps eta0;
``'invscaling'`` sets lr = eta0 / (t + 1) ** power_t at the end of each epoch, t being
the number of samples seen so far; ``'optimal'`` is SGDRegressor's schedule,
lr = 1 / (alpha * (t0 + t)), with Bottou's t0 = 1 / (alpha * sqrt(1 / sqrt(alpha))) as
scikit-learn chooses it for its regression and log losses (eta0 is not used). The rate
changes once per epoch where scikit-learn's SGD changes it after every sample.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator

import numpy as np
import onnx
from sklearn.base import BaseEstimator

from .errors import OrtBenchError
from .graphs.builder import GraphBuilder
from .penalties import BaseLearningPenalty, NoLearningPenalty

_SCHEDULES = ("constant", "invscaling", "optimal")


class BaseLearningRate(BaseEstimator):
    """Schedule state shared by every learning rate, and the SGD family's update.

    Parameters
    ----------
    eta0 : float, default=0.01
        The initial learning rate.
    alpha : float, default=0.0001
        The constant of ``'optimal'``.
    power_t : float, default=0.25
        The exponent of ``'invscaling'``.
    learning_rate : {'constant', 'invscaling', 'optimal'}, default='constant'
        The schedule: ``'invscaling'`` sets ``eta0 / (t + 1) ** power_t`` at the end of
        each epoch, ``t`` being the samples seen so far; ``'optimal'`` sets
        ``1 / (alpha * (t0 + t))`` as SGDRegressor does (see the module's docstring).

    Attributes
    ----------
    value : float
        The current rate, set by :meth:`init_learning_rate`.
    """

    #: Tensors of optimizer state kept per weight: 0 (SGD) or 1 (momentum).
    n_states = 0

    def __init__(
        self,
        eta0: float = 0.01,
        alpha: float = 0.0001,
        power_t: float = 0.25,
        learning_rate: str = "constant",
    ):
        self.eta0 = eta0
        self.alpha = alpha
        self.power_t = power_t
        self.learning_rate = learning_rate

    @classmethod
    def select(cls, learning_rate=None, **kwargs) -> BaseLearningRate:
        """The learning rate object a trainer's ``learning_rate`` parameter names.

        Parameters
        ----------
        learning_rate : BaseLearningRate, float, str or None
            An object (returned as it is), a float (the seed's default schedule,
            ``LearningRateSGD(eta0=value, learning_rate='invscaling')``), a name:
            ``'SGD'`` or ``'LearningRateSGD'``, ``'Nesterov'``, ``'SGDNesterov'`` or
            ``'LearningRateSGDNesterov'`` (with the seed's schedule too, 'invscaling',
            unless ``kwargs`` says otherwise), or None (``LearningRateSGD()``).
        **kwargs
            Parameters of the class a name selects.

        Returns
        -------
        BaseLearningRate

        Raises
        ------
        OrtBenchError
            For any other value.
        """
        if isinstance(learning_rate, BaseLearningRate):
            return learning_rate
        if learning_rate is None:
            return LearningRateSGD(**kwargs)
        if isinstance(learning_rate, (float, int)) and not isinstance(learning_rate, bool):
            return LearningRateSGD(eta0=float(learning_rate), learning_rate="invscaling")
        for klass, names in _NAMES.items():
            if learning_rate in names:
                return klass(**{"learning_rate": "invscaling", **kwargs})
        known = sorted(n for names in _NAMES.values() for n in names)
        raise OrtBenchError(
            f"unknown learning rate {learning_rate!r}: give a float, a BaseLearningRate or "
            f"one of {known}"
        )

    def check(self) -> None:
        """Raise a one-line error for invalid hyper-parameters."""
        if not _finite_at_least(self.eta0, 0) or self.eta0 == 0:
            raise OrtBenchError(f"eta0 must be a finite number > 0, got {self.eta0!r}")
        if not _finite_at_least(self.power_t, 0):
            raise OrtBenchError(f"power_t must be a finite number >= 0, got {self.power_t!r}")
        if self.learning_rate == "optimal" and not self.alpha > 0:
            raise OrtBenchError(f"the 'optimal' schedule needs alpha > 0, got {self.alpha}")
        if self.learning_rate not in _SCHEDULES:
            raise OrtBenchError(
                f"learning_rate must be one of {_SCHEDULES}, got {self.learning_rate!r}"
            )

    def init_learning_rate(self) -> BaseLearningRate:
        """Start the schedule: ``value`` is the rate of the first epoch."""
        self.check()
        self.value = float(self.eta0)
        if self.learning_rate == "optimal":
            self.value = self._optimal(0)
        return self

    def update_learning_rate(self, t: int) -> float:
        """End of an epoch after ``t`` samples seen in all: the next epoch's rate."""
        if self.learning_rate == "invscaling":
            self.value = float(self.eta0) / (t + 1) ** self.power_t
        elif self.learning_rate == "optimal":
            self.value = self._optimal(t)
        return self.value

    def _optimal(self, t: int) -> float:
        alpha = float(self.alpha)
        t0 = 1.0 / (alpha * np.sqrt(1.0 / np.sqrt(alpha)))
        return float(1.0 / (alpha * (t0 + t)))

    def loop(self, n: int = 1000, samples_per_epoch: int = 1) -> Iterator[float]:
        """Yield the rates of ``n`` successive epochs, as a fit would use them.

        Parameters
        ----------
        n : int
            How many rates.
        samples_per_epoch : int
            Samples seen by an epoch (the schedules count samples).

        Returns
        -------
        iterator of float
            The first epoch's rate, then the rate after each epoch.
        """
        self.init_learning_rate()
        for epoch in range(n):
            yield self.value
            self.update_learning_rate((epoch + 1) * samples_per_epoch)

    def gradient_scale(self) -> float:
        """What multiplies ``-lr * g`` in the step ``e``."""
        return 1.0

    def step_factor(self, value: float) -> float:
        """The factor turning a gradient into the step at learning rate ``value``."""
        return -value * self.gradient_scale()

    def state_coefficients(self) -> tuple[float, float]:
        """``(c_s, c_e)`` of the state update ``s_new = c_s * s + c_e * e``."""
        raise OrtBenchError(f"{type(self).__name__} keeps no optimizer state")

    # -- ONNX nodes and graphs --------------------------------------------------------------

    def weight_nodes(self, b: GraphBuilder, weight: str, state: str | None, step: str) -> str:
        """Add ``w + s + e`` (``w + e`` without state); return the new weight's name."""
        return b.op("Sum", weight, state, step) if state else b.op("Add", weight, step)

    def state_nodes(self, b: GraphBuilder, state: str, step: str) -> str:
        """Add ``c_s * s + c_e * e``; return the new state's name."""
        c_s, c_e = self.state_coefficients()
        return b.op("Add", b.op("Mul", state, b.const(c_s)), b.op("Mul", step, b.const(c_e)))

    def update_nodes(self, b: GraphBuilder, weight: str, step: str, states):
        """The whole update from the step ``e`` (the gradient times :meth:`step_factor`),
        in one graph; return (weight, states). Used by the fused full step.

        Without a state, ``w + e`` is a ``Sum`` there, not an ``Add``: where ``e`` comes out
        of a ``Gemm`` (a weight's gradient), onnxruntime folds the ``Sum`` into that ``Gemm``.
        """
        state = states[0] if states else None
        if state is None:
            return b.op("Sum", weight, step), []
        return self.weight_nodes(b, weight, state, step), [self.state_nodes(b, state, step)]

    def build_onnx_function(
        self,
        shapes: dict[str, list],
        penalty: BaseLearningPenalty | None = None,
        penalty_masks: dict | None = None,
    ) -> onnx.ModelProto:
        """The forward/backward trainer's update graph, for every tensor of ``shapes``.

        ``shapes`` names the tensors to update (one flat tensor holding every weight, or
        one per weight). Inputs, for each tensor ``<w>``: ``<w>``, ``<w>_step`` (the
        scaled gradient ``e``) and ``<w>_state`` when the rate keeps a state; then
        ``step_scale`` (scalar, :meth:`step_factor`) when the penalty is active.
        Outputs: ``<w>_new`` (and ``<w>_state_new``) for each tensor, then ``penalty``
        (scalar) when the penalty is active. ``penalty_masks[w]`` says what the penalty
        applies to: True (all), False (nothing, e.g. a bias) or a 0/1 array
        (coefficients inside a flat tensor); all by default.
        """
        penalty = penalty or NoLearningPenalty()
        masks = penalty_masks or {}
        b = GraphBuilder(f"update_{type(self).__name__}")
        scale = b.input("step_scale", []) if penalty.is_active() else None
        penalties = []
        for name, shape in shapes.items():
            weight = b.input(name, shape)
            step = b.input(f"{name}_step", shape)
            state = b.input(f"{name}_state", shape) if self.n_states else None
            mask = masks.get(name, True)
            if scale and mask is not False:
                penalised = weight if mask is True else b.op("Mul", weight, b.const(mask))
                gradient = penalty.gradient_nodes(b, penalised)
                step = b.op("Add", step, b.op("Mul", gradient, scale))
                penalties.append(penalty.penalty_nodes(b, penalised))
            if state:
                b.output(b.rename(self.state_nodes(b, state, step), f"{name}_state_new"), shape)
            b.output(b.rename(self.weight_nodes(b, weight, state, step), f"{name}_new"), shape)
        if penalties:
            b.output(b.add_all(penalties, name="penalty"), [])
        return b.to_model()

    def build_stacked_function(self, size: int) -> onnx.ModelProto:
        """The update of a flat weight, state and step stored as adjacent rows.

        Inputs: ``weight_state_step`` (3, size), the rows w, s and e in any order;
        ``state_step`` (2, size), the rows s and e; ``state_coefficients`` (1, 2), the
        (c_s, c_e) of :meth:`state_coefficients` in the order of ``state_step``'s rows.
        Outputs: ``weight_new`` (1, size), w + s + e, and ``state_new`` (1, size).
        onnxruntime runs a (1, k) by (k, n) product in one pass over its k rows, faster
        than ``Sum`` or a (2, 3) product, and as ``Gemm`` faster than as ``MatMul`` (no
        broadcasting helper; figures in ``benchmarks/README.md``).
        """
        b = GraphBuilder(f"stacked_update_{type(self).__name__}")
        rows = b.input("weight_state_step", [3, size])
        state_rows = b.input("state_step", [2, size])
        coefficients = b.input("state_coefficients", [1, 2])
        b.op("Gemm", b.const(np.ones((1, 3))), rows, name="weight_new")
        b.op("Gemm", coefficients, state_rows, name="state_new")
        b.output("weight_new", [1, size])
        b.output("state_new", [1, size])
        return b.to_model()


class LearningRateSGD(BaseLearningRate):
    """Plain stochastic gradient descent: w += -lr * g.

    Parameters
    ----------
    eta0, alpha, power_t, learning_rate
        The schedule, as :class:`BaseLearningRate` takes it.
    """


class LearningRateSGDNesterov(BaseLearningRate):
    """SGD with momentum, Nesterov's by default, as MLPRegressor(solver='sgd') runs it.

    Parameters
    ----------
    eta0, alpha, power_t, learning_rate
        The schedule, as :class:`BaseLearningRate` takes it.
    momentum : float, default=0.9
        In [0, 1).
    nesterov : bool, default=True
        Nesterov's momentum, else classical momentum.
    """

    n_states = 1

    def __init__(
        self,
        eta0: float = 0.01,
        alpha: float = 0.0001,
        power_t: float = 0.25,
        learning_rate: str = "constant",
        momentum: float = 0.9,
        nesterov: bool = True,
    ):
        super().__init__(eta0=eta0, alpha=alpha, power_t=power_t, learning_rate=learning_rate)
        self.momentum = momentum
        self.nesterov = nesterov

    def check(self) -> None:
        super().check()
        if not 0 <= self.momentum < 1:
            raise OrtBenchError(f"momentum must be in [0, 1), got {self.momentum}")

    def gradient_scale(self) -> float:
        return 1.0 + self.momentum if self.nesterov else 1.0

    def state_coefficients(self) -> tuple[float, float]:
        m = self.momentum
        return (m, m * m / (1 + m)) if self.nesterov else (m, m)


class LearningRateAdamW(BaseLearningRate):
    """AdamW as onnxruntime's on-device optimizer runs it (FullTrainer, backend
    'ort-training' only).

    That optimizer is onnxruntime-training's ``AdamWOptimizer`` in its Hugging Face mode
    (``adam_mode=1``, which ``onnxblock.optim.AdamW`` builds), with bias correction. At
    step ``t`` (1 at the first batch after the graphs are built: a rebuild restarts ``t``
    and the moments), for each weight ``w``, its gradient ``g`` and the current rate
    ``lr``, the moments ``m`` and ``v`` starting at zero:

    - ``m = beta1 * m + (1 - beta1) * g`` and ``v = beta2 * v + (1 - beta2) * g**2``;
    - ``w = w - lr * sqrt(1 - beta2**t) / (1 - beta1**t) * m / (sqrt(v) + epsilon)``, that
      is ``w - lr * m_hat / (sqrt(v_hat) + epsilon / sqrt(1 - beta2**t))`` with
      ``m_hat = m / (1 - beta1**t)`` and ``v_hat = v / (1 - beta2**t)``;
    - then ``w = w - lr * weight_decay * w``, the decay of the weight just updated.

    In all, ``w_t = (1 - lr * weight_decay) * (w - lr * m_hat / (sqrt(v_hat) + epsilon /
    sqrt(1 - beta2**t)))``; the first step is ``w - lr * g / (|g| + epsilon /
    sqrt(1 - beta2))``, then decayed. torch.optim.AdamW differs in two places: it adds
    ``epsilon`` after the bias correction (``sqrt(v_hat) + epsilon``) and decays the weight
    before the step, ``w * (1 - lr * weight_decay) - lr * m_hat / (sqrt(v_hat) + epsilon)``.

    Parameters
    ----------
    eta0, alpha, power_t, learning_rate
        The schedule, as :class:`BaseLearningRate` takes it (``eta0`` 0.001 by default).
    beta1, beta2 : float, default=0.9, 0.999
        Decay rates of the first and second moment estimates, in [0, 1).
    epsilon : float, default=1e-8
        Added to the second moment's square root before the bias correction (see above);
        finite, > 0.
    weight_decay : float, default=0.01
        Decoupled weight decay, finite, >= 0.

    Integers are accepted and used as floats (``weight_decay=0``); a bool is refused.
    They are checked when a trainer starts a fit (:meth:`check`), where they are also
    stored as floats in the trainer's copy (``learning_rate_``), as onnxruntime's
    optimizer attributes are floats.
    """

    #: The hyper-parameters onnxruntime's AdamWOptimizer reads as float attributes.
    _float_params = ("beta1", "beta2", "epsilon", "weight_decay")

    def __init__(
        self,
        eta0: float = 0.001,
        alpha: float = 0.0001,
        power_t: float = 0.25,
        learning_rate: str = "constant",
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        weight_decay: float = 0.01,
    ):
        super().__init__(eta0=eta0, alpha=alpha, power_t=power_t, learning_rate=learning_rate)
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.weight_decay = weight_decay

    def check(self) -> None:
        """Raise a one-line error, naming the class, for invalid hyper-parameters."""
        name = type(self).__name__
        try:
            super().check()
        except OrtBenchError as e:
            raise OrtBenchError(f"{name}: {e}") from None
        for param in ("beta1", "beta2"):
            value = getattr(self, param)
            if not (_finite_at_least(value, 0) and value < 1):
                raise OrtBenchError(f"{name}: {param} must be in [0, 1), got {value!r}")
        if not _finite_at_least(self.epsilon, 0) or self.epsilon == 0:
            raise OrtBenchError(
                f"{name}: epsilon must be a finite number > 0, got {self.epsilon!r}"
            )
        if not _finite_at_least(self.weight_decay, 0):
            raise OrtBenchError(
                f"{name}: weight_decay must be a finite number >= 0, got {self.weight_decay!r}"
            )

    def init_learning_rate(self) -> LearningRateAdamW:
        """Check, start the schedule, and store the hyper-parameters as floats (the
        trainer calls it on its own copy, ``learning_rate_``, which onnxruntime's
        optimizer reads: an int there is an attribute of the wrong type)."""
        super().init_learning_rate()
        for param in self._float_params:
            setattr(self, param, float(getattr(self, param)))
        return self

    def update_nodes(self, b, weight, step, states):
        raise OrtBenchError(
            "LearningRateAdamW runs only in FullTrainer (onnxruntime's own AdamW optimizer)"
        )


_NAMES = {
    LearningRateSGD: ("SGD", "LearningRateSGD"),
    LearningRateSGDNesterov: ("Nesterov", "SGDNesterov", "LearningRateSGDNesterov"),
}


def _finite_at_least(value, low: float) -> bool:
    """Whether ``value`` is a real number (not a bool), finite and at least ``low``."""
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and bool(np.isfinite(value))
        and value >= low
    )
