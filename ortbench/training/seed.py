"""The seed's API: ``OrtGradientOptimizer`` and ``OrtGradientForwardBackwardOptimizer``.

The onnxcustom tutorial ortbench grew from trained ONNX graphs with two classes. They are
here with the constructor parameters, defaults, repr and conventions its documents show,
as subclasses of :class:`FullTrainer` and :class:`ForwardBackwardTrainer`, which run the
steps. What the seed did differently from scikit-learn, these classes do as the seed did,
and only they (importing them from this module is the explicit choice):

- a float learning rate is ``LearningRateSGD(eta0=value, learning_rate='invscaling')``,
  a name is looked up by :meth:`BaseLearningRate.select`, and the schedule's ``t`` counts
  epochs, not samples;
- the squared error is the seed's, ``(p - y)^2`` with gradient ``2 (p - y)``: the
  forward/backward class's ``'square_error'`` is ``SquareLearningLoss(convention='seed')``
  and this module's :func:`add_loss_output` sums the loss over the batch, which
  ``OrtGradientOptimizer`` trains with the learning rate divided by the batch size;
- a fit that does not warm start draws the trained weights from a standard normal
  distribution (numpy's global generator, as the seed did);
- ``validation_every`` below 1 is a fraction of ``max_iter``; parameters are resolved
  when the object is created, and the repr lists every one of them;
- this module's ``LearningRateSGD`` and ``LearningRateSGDNesterov`` decay by
  ``'invscaling'`` by default, check their schedule when created and start
  ``'optimal'`` at ``eta0``; its ``SquareLearningLoss`` and ``NegLogLearningLoss`` have
  the seed's defaults. Names and floats given to the two classes select these.

``docs/seed_api.md`` lists the differences with :class:`FullTrainer` and
:class:`ForwardBackwardTrainer` side by side.
"""

from __future__ import annotations

import inspect
import logging
import warnings

import numpy as np
import onnx
import onnxruntime
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning

from . import learning_rates, losses
from .errors import ConvergenceError, NotSupportedError, OrtBenchError
from .estimators.forward_backward import ForwardBackwardTrainer
from .estimators.full import FullTrainer
from .gradients.derivative import DerivativeOptions, onnx_derivative
from .graphs import loss_graph
from .graphs.loading import load_model
from .graphs.nodes import rewrite_linear_nodes
from .graphs.outputs import select_outputs
from .graphs.shapes import inferred_shapes
from .graphs.weights import check_weight_names, set_initializers
from .learning_rates import BaseLearningRate
from .losses import AbsoluteLearningLoss, BaseLearningLoss, ElasticLearningLoss
from .penalties import BaseLearningPenalty
from .seed_functions import function_onnx_graph, get_supported_functions, unreduced_onnx_loss
from .seed_utils import (
    OrtDataLoader,
    device_to_providers,
    dtype_to_var_type,
    get_onnx_opset,
    get_train_initializer,
    proto_type_to_dtype,
)

#: The logger ``enable_logging=True`` writes one line per epoch to (level INFO).
LOGGER = logging.getLogger("ortbench.seed")

__all__ = [
    "AbsoluteLearningLoss",
    "ElasticLearningLoss",
    "LearningRateSGD",
    "LearningRateSGDNesterov",
    "NegLogLearningLoss",
    "OrtGradientForwardBackwardOptimizer",
    "OrtDataLoader",
    "OrtGradientOptimizer",
    "SquareLearningLoss",
    "add_loss_output",
    "device_to_providers",
    "dtype_to_var_type",
    "function_onnx_graph",
    "get_onnx_opset",
    "get_supported_functions",
    "get_train_initializer",
    "proto_type_to_dtype",
    "unreduced_onnx_loss",
]


class _SeedSchedule:
    """The seed's schedules: ``'invscaling'`` by default, the name checked when the
    object is created, and ``'optimal'`` scaled so that its first rate is ``eta0``."""

    def _optimal(self, t: int) -> float:
        # Bottou's t0 as the seed chose it for its squared error, whose gradient at
        # prediction -typw and label 1 is 2 (1 + typw); the rate is then
        # eta0 * t0 / (t0 + t): eta0 at t = 0, slowly decreasing after.
        alpha = float(self.alpha)
        typw = np.sqrt(1.0 / np.sqrt(alpha))
        t0 = max(1.0, 2.0 * (1.0 + typw)) / (alpha * typw)
        return float(self.eta0) * t0 / (t0 + t)


class LearningRateSGD(_SeedSchedule, learning_rates.LearningRateSGD):
    """The seed's ``LearningRateSGD``: plain SGD, ``'invscaling'`` by default.

    Parameters
    ----------
    eta0 : float, default=0.01
        The first rate.
    alpha : float, default=0.0001
        The constant of ``'optimal'``.
    power_t : float, default=0.25
        The exponent of ``'invscaling'``: ``eta0 / (t + 1) ** power_t``.
    learning_rate : {'invscaling', 'constant', 'optimal'}, default='invscaling'
        The schedule; ``'optimal'`` is ``eta0 * t0 / (t0 + t)``, ``t0`` being Bottou's
        heuristic for ``alpha``. ``t`` counts epochs.

    Raises
    ------
    OrtBenchError
        For an unknown schedule or a bad value (a ``ValueError``, as the seed raised).
    """

    def __init__(
        self,
        eta0: float = 0.01,
        alpha: float = 0.0001,
        power_t: float = 0.25,
        learning_rate: str = "invscaling",
    ):
        super().__init__(eta0=eta0, alpha=alpha, power_t=power_t, learning_rate=learning_rate)
        self.check()


class LearningRateSGDNesterov(_SeedSchedule, learning_rates.LearningRateSGDNesterov):
    """The seed's ``LearningRateSGDNesterov``: momentum, ``'invscaling'`` by default.

    Parameters
    ----------
    eta0, alpha, power_t, learning_rate
        As :class:`LearningRateSGD`.
    momentum : float, default=0.9
        In [0, 1).
    nesterov : bool, default=True
        Nesterov's momentum, else classical momentum.

    Raises
    ------
    OrtBenchError
        For an unknown schedule or a bad value.
    """

    def __init__(
        self,
        eta0: float = 0.01,
        alpha: float = 0.0001,
        power_t: float = 0.25,
        learning_rate: str = "invscaling",
        momentum: float = 0.9,
        nesterov: bool = True,
    ):
        super().__init__(
            eta0=eta0,
            alpha=alpha,
            power_t=power_t,
            learning_rate=learning_rate,
            momentum=momentum,
            nesterov=nesterov,
        )
        self.check()


class SquareLearningLoss(losses.SquareLearningLoss):
    """The seed's squared error: ``(p - y)^2``, gradient ``2 (p - y)`` by default.

    Parameters
    ----------
    convention : {'seed', 'sklearn'}, default='seed'
        As :class:`ortbench.training.SquareLearningLoss`.
    """

    def __init__(self, convention: str = "seed"):
        super().__init__(convention=convention)


class NegLogLearningLoss(losses.NegLogLearningLoss):
    """The seed's log loss: ``eps`` 1e-5 by default (ortbench's is float32's epsilon).

    Parameters
    ----------
    eps : float, default=1e-5
        Probabilities are clipped to [eps, 1 - eps].
    probability_function : str, default='sigmoid'
        As :class:`ortbench.training.NegLogLearningLoss`.
    """

    def __init__(self, eps: float = 1e-5, probability_function: str = "sigmoid"):
        super().__init__(eps=eps, probability_function=probability_function)


def add_loss_output(
    onx,
    score_name: str = "squared_error",
    loss_name: str = "loss",
    label_name: str = "label",
    weight_name: str | None = None,
    penalty: dict | None = None,
    output_index: int | str | None = None,
    **kwargs,
) -> onnx.ModelProto:
    """The seed's ``add_loss_output``: a loss summed over the batch, shaped (1, 1).

    It is :func:`ortbench.training.add_loss_output` with ``convention='seed'``; the
    parameters are the seed's, ``kwargs`` its ``l1_weight`` and ``l2_weight``.

    Parameters
    ----------
    onx : onnx.ModelProto
        The model.
    score_name : str
        ``'squared_error'`` or ``'l2'``, ``'absolute_error'`` or ``'l1'``, ``'elastic'``,
        ``'log'``.
    loss_name, label_name : str
        The new output and the new label input.
    weight_name : str, optional
        A sample-weight input (n,) multiplying each row's loss.
    penalty : dict, optional
        ``{'coef': {'l1': a, 'l2': b}}`` or ``{'coef': b}`` (an L2 weight).
    output_index : int or str, optional
        The output compared with the labels, by position or name.
    **kwargs
        ``l1_weight``, ``l2_weight`` of the elastic loss.

    Returns
    -------
    onnx.ModelProto

    Raises
    ------
    OrtBenchError
        As :func:`ortbench.training.add_loss_output`.
    """
    return loss_graph.add_loss_output(
        onx,
        score_name=score_name,
        loss_name=loss_name,
        label_name=label_name,
        weight_name=weight_name,
        penalty=penalty,
        output_index=output_index,
        convention="seed",
        **kwargs,
    )


def _as_seed_stored(params: dict) -> dict:
    """A seed constructor's arguments as the seed stored them: the learning rate, the loss
    and the penalty as objects (names and floats selected), ``validation_every`` in epochs."""
    params = dict(params)
    params["learning_rate"] = _seed_rate(params["learning_rate"])
    params["validation_every"] = _validation_every(params["validation_every"], params["max_iter"])
    if "learning_loss" in params:
        params["learning_loss"] = _seed_loss(params["learning_loss"])
    if "learning_penalty" in params:
        params["learning_penalty"] = BaseLearningPenalty.select(params["learning_penalty"])
    return params


def _validation_every(value, max_iter: int) -> int:
    """The seed's ``validation_every``: a number of epochs, or below 1 a fraction of them."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise OrtBenchError(
            f"validation_every must be an integer >= 1 or a fraction in (0, 1), got {value!r}"
        )
    return max(1, int(max_iter * value)) if value < 1 else int(value)


def _declare_output_shapes(model: onnx.ModelProto) -> None:
    """Give the outputs declared without a shape the one onnx infers, in place."""
    missing = [o for o in model.graph.output if not o.type.tensor_type.HasField("shape")]
    if not missing:
        return
    shapes, _ = inferred_shapes(model)
    for output in missing:
        if output.name in shapes:
            dims = [d if d is not None else "N" for d in shapes[output.name]]
            output.type.CopyFrom(
                onnx.helper.make_tensor_type_proto(output.type.tensor_type.elem_type, dims)
            )


def _column_as_1d(values):
    """A one-column 2-D array as a 1-D one; anything else as it is."""
    if values is not None and np.ndim(values) == 2 and np.shape(values)[1] == 1:
        return np.asarray(values).ravel()
    return values


def _seed_repr(value) -> str:
    """An estimator-like object with all its parameters, in signature order."""
    if not isinstance(value, BaseEstimator):
        return repr(value)
    params = value.get_params(deep=False)
    names = [k for k in inspect.signature(type(value).__init__).parameters if k in params]
    shown = [f"{k}={params[k]!r}" for k in names]
    return f"{type(value).__name__}({', '.join(shown)})"


class _SeedBehaviour:
    """What both seed classes add to the trainers they extend."""

    shuffle = True
    random_state = None
    intra_op_threads = "auto"
    backend = None
    epoch_loop = False

    #: True when the trained loss is a sum over the batch, as the seed's full class
    #: assumed: steps then use the rate divided by the batch size and the reported
    #: loss is divided by it too, as the seed did.
    _summed_loss = False

    def __repr__(self) -> str:
        """The seed's repr: every parameter; long values cut to 10 characters and '...'."""
        shown = []
        for name in inspect.signature(type(self).__init__).parameters:
            if name == "self":
                continue
            value = getattr(self, name)
            if isinstance(value, (BaseLearningRate, BaseLearningLoss, BaseLearningPenalty)):
                shown.append(f"{name}={_seed_repr(value)}")
                if name == "learning_rate" and hasattr(self, "learning_rate_"):
                    shown.append(f"value={self.learning_rate_.value!r}")
                continue
            text = repr(value)
            if len(text) > 50 or "\n" in text:
                text = repr(text[:10].replace("\n", " ") + "...")
            shown.append(f"{name}={text}")
        return f"{type(self).__name__}({', '.join(shown)})"

    def fit(self, X, y, sample_weight=None, X_val=None, y_val=None, sample_weight_val=None):
        """Train on (X, y), from weights drawn anew unless ``warm_start``.

        Parameters
        ----------
        X : array-like (n, features)
        y : array-like (n,) or (n, outputs)
        sample_weight : array-like (n,), optional
            Fed to the model's weight input (see ``sample_weight_name``/``weight_name``).
        X_val, y_val, sample_weight_val : optional
            Validation data, scored every ``validation_every`` epochs.

        Returns
        -------
        self

        Raises
        ------
        ConvergenceError
            When the loss becomes NaN or infinite and ``exc`` is True (with ``exc=False``
            a ConvergenceWarning is emitted and training stops with the weights from
            before that epoch).
        """
        try:
            super().fit(X, y, sample_weight, X_val, y_val, sample_weight_val)
        except ConvergenceError as e:
            if self.exc:
                raise
            warnings.warn(str(e), ConvergenceWarning, stacklevel=2)
            self.n_iter_ = len(self.train_losses_)
        return self

    def _check_data(self, X, y, sample_weight, fitted_classes: bool):
        """The seed's columns: class labels and sample weights shaped (n, 1) are 1-D."""
        y, sample_weight = (
            _column_as_1d(y) if self.is_classifier_ else y,
            _column_as_1d(sample_weight),
        )
        return super()._check_data(X, y, sample_weight, fitted_classes)

    def _check_params(self) -> None:
        if self.training_optimizer_name != "SGDOptimizer":
            raise OrtBenchError(
                f"training_optimizer_name must be 'SGDOptimizer', got "
                f"{self.training_optimizer_name!r}"
            )
        super()._check_params()

    def _prepare_model(self) -> None:
        super()._prepare_model()
        # the seed's tests select an intermediate result (a classifier's raw ``score``)
        # as the output: its width, undeclared, comes from shape inference
        _declare_output_shapes(self._train_model)
        if self.warm_start:
            return  # a first fit with warm_start starts from the model's weights
        drawn = {}
        for init in self.model_.graph.initializer:
            if init.name in self.weights_:
                drawn[init.name] = np.random.randn(*init.dims).astype(np.float32)
        self.model_ = set_initializers(self.model_, drawn)
        self._train_model = set_initializers(self._train_model, drawn)

    def _run_epoch(self, loader) -> float:
        loss = super()._run_epoch(loader)
        if self._summed_loss:
            loss /= self.batch_size
        if self.enable_logging:
            LOGGER.info(
                "[%s._iteration] epoch %d/%d loss=%g lr=%g",
                type(self).__name__,
                len(self.train_losses_) + 1,
                self.max_iter,
                loss,
                self.learning_rate_.value,
            )
        return loss

    def _step_rate(self, epoch: int) -> float:
        # the seed's schedules count epochs: t is the index of the epoch just finished
        if epoch:
            self.learning_rate_.update_learning_rate(len(self.train_losses_) - 1)
        value = self.learning_rate_.value
        return value / self.batch_size if self._summed_loss else value


class OrtGradientOptimizer(_SeedBehaviour, FullTrainer):
    """The seed's full-training class: the model outputs its loss; onnxruntime computes
    the gradient and updates the weights.

    Parameters
    ----------
    model_onnx : onnx.ModelProto
        A model with a loss output, as :func:`add_loss_output` makes it.
    weights_to_train : list of str
        The initializers to train.
    loss_output_name : str
        The loss output.
    max_iter : int
        Epochs.
    training_optimizer_name : str
        ``'SGDOptimizer'``, the only optimizer the seed had.
    batch_size : int
        Rows per step.
    learning_rate : float, str or BaseLearningRate
        See :meth:`BaseLearningRate.select`; a float is ``LearningRateSGD(eta0=value,
        learning_rate='invscaling')``. The optimizer steps with the rate divided by
        ``batch_size`` and ``train_losses_`` holds the loss divided by it, the seed's
        convention for a loss summed over the batch.
    device : str
        ``'cpu'`` or ``'cuda'``.
    warm_start : bool
        Continue from the previous fit's weights; otherwise draw them anew.
    verbose : int
        Print one progress line per epoch.
    validation_every : int or float
        Score the validation data every that many epochs, or that fraction of max_iter.
    saved_gradient : str, optional
        A file name: the first fit writes the gradient graph of the loss there, and the
        training graph onnxruntime runs to ``saved_gradient + '.training.onnx'``.
    sample_weight_name : str
        The model's sample-weight input; ``fit(sample_weight=...)`` needs it.
    """

    exc = True
    enable_logging = False
    _summed_loss = True

    def __init__(
        self,
        model_onnx,
        weights_to_train,
        loss_output_name="loss",
        max_iter=100,
        training_optimizer_name="SGDOptimizer",
        batch_size=10,
        learning_rate="SGD",
        device="cpu",
        warm_start=False,
        verbose=0,
        validation_every=0.1,
        saved_gradient=None,
        sample_weight_name="weight",
    ):
        self._keep_params(_as_seed_stored(locals()))
        if self.learning_rate.n_states:
            raise NotSupportedError(
                f"OrtGradientOptimizer trains with plain SGD only, got "
                f"{type(self.learning_rate).__name__}: use "
                f"OrtGradientForwardBackwardOptimizer for momentum"
            )

    def _learning_loss(self) -> BaseLearningLoss:
        return SquareLearningLoss()

    def fit(
        self,
        X,
        y,
        sample_weight=None,
        X_val=None,
        y_val=None,
        use_numpy=False,
        sample_weight_val=None,
    ):
        """Train on (X, y), from weights drawn anew unless ``warm_start``.

        Parameters
        ----------
        X, y, sample_weight, X_val, y_val, sample_weight_val
            As for :meth:`FullTrainer.fit`; ``sample_weight`` is fed to the model's input
            ``sample_weight_name``.
        use_numpy : bool
            Kept for the seed's signature, where it chose numpy or onnxruntime for
            copying batches: ortbench feeds onnxruntime the same way either way.

        Returns
        -------
        self

        Raises
        ------
        OrtBenchError
            When ``sample_weight`` is given and the model has no input
            ``sample_weight_name``, and as :meth:`FullTrainer.fit`.
        """
        if sample_weight is not None:
            inputs = [i.name for i in load_model(self.model_onnx).graph.input]
            if self.sample_weight_name not in inputs:
                raise OrtBenchError(
                    f"sample_weight needs a model input named {self.sample_weight_name!r} "
                    f"(sample_weight_name): add one with add_loss_output(..., weight_name=...)"
                )
        return super().fit(X, y, sample_weight, X_val, y_val, sample_weight_val)

    def _prepare_model(self) -> None:
        outputs = [o.name for o in load_model(self.model_onnx).graph.output]
        if self.loss_output_name not in outputs:
            raise OrtBenchError(
                f"the model has no output {self.loss_output_name!r}: add a loss with "
                f"add_loss_output first"
            )
        super()._prepare_model()

    def _build(self) -> None:
        super()._build()
        if self.saved_gradient is not None:
            with_loss = select_outputs(self.model_, [self.loss_output_name])
            options = DerivativeOptions.KeepOutputs | DerivativeOptions.FillGrad
            gradient = onnx_derivative(with_loss, self.weights_, inputs=[], options=options)
            onnx.save_model(gradient, self.saved_gradient)
            training = self._graphs().get("training_model") or self._graphs()["fused_step"]
            with open(f"{self.saved_gradient}.training.onnx", "wb") as f:
                f.write(training if isinstance(training, bytes) else training.SerializeToString())


class OrtGradientForwardBackwardOptimizer(_SeedBehaviour, ForwardBackwardTrainer):
    """The seed's forward/backward class: onnxruntime-training computes the model's
    gradient; small ONNX graphs compute the loss, the penalty and the update.

    Parameters
    ----------
    model_onnx : onnx.ModelProto
        The model (no loss in it).
    weights_to_train : list of str, optional
        The initializers to train; None chooses them when the object is created: every
        float initializer that is a parameter (see :func:`trainable_initializers`).
    loss_output_name : str
        Kept for the seed's signature (the loss is not part of the model here).
    max_iter : int
        Epochs.
    training_optimizer_name : str
        ``'SGDOptimizer'`` (the update is the learning rate object's).
    batch_size : int
        Rows per step.
    learning_rate : float, str or BaseLearningRate
        See :meth:`BaseLearningRate.select`; ``'Nesterov'`` adds momentum.
    device : str
        ``'cpu'`` or ``'cuda'``.
    warm_start : bool
        Continue from the previous fit's weights; otherwise draw them anew.
    verbose : int
        Print one progress line per epoch.
    validation_every : int or float
        Score the validation data every that many epochs, or that fraction of max_iter.
    learning_loss : str or BaseLearningLoss
        See :meth:`BaseLearningLoss.select`; ``'square_error'`` is the seed's squared
        error, ``SquareLearningLoss(convention='seed')``.
    enable_logging : bool
        Log one line per epoch (loss, learning rate) to the ``ortbench.seed`` logger.
    weight_name : str, optional
        Kept for the seed's signature: the loss graph always takes the sample weights
        ``fit`` is given (the seed built a weighted loss graph only when it was set).
    learning_penalty : str, BaseLearningPenalty or None
        See :meth:`BaseLearningPenalty.select`.
    exc : bool
        Raise :class:`ConvergenceError` when the loss diverges (True) or warn and stop.
    """

    training_optimizer_name = "SGDOptimizer"

    def __init__(
        self,
        model_onnx,
        weights_to_train=None,
        loss_output_name="loss",
        max_iter=100,
        training_optimizer_name="SGDOptimizer",
        batch_size=10,
        learning_rate="SGD",
        device="cpu",
        warm_start=False,
        verbose=0,
        validation_every=0.1,
        learning_loss="square_error",
        enable_logging=False,
        weight_name=None,
        learning_penalty=None,
        exc=True,
    ):
        if weights_to_train is None:
            weights_to_train = check_weight_names(rewrite_linear_nodes(model_onnx), None)
        self._keep_params(_as_seed_stored(locals()))

    @property
    def trained_coef_(self) -> dict[str, onnxruntime.OrtValue]:
        """Trained weights by name as OrtValues, as the seed returned them."""
        values = {}
        for name, array in self.get_state().items():
            # an OrtValue owning its memory: ortvalue_from_numpy would borrow the array's
            values[name] = onnxruntime.OrtValue.ortvalue_from_shape_and_type(
                array.shape, np.float32
            )
            values[name].update_inplace(array)
        return values

    def get_full_state(self, kind: str = "weight") -> list:
        """The training graph's inputs the trainer owns: None for each data input, then
        the trained weights (arrays) in ``weights_to_train`` order, the seed's layout.

        Parameters
        ----------
        kind : str
            ``'weight'``, the only kind kept (the engine stores momentum in another form
            than the seed's per-weight velocities).

        Returns
        -------
        list

        Raises
        ------
        OrtBenchError
            For another kind, or before fit.
        """
        if kind != "weight":
            raise OrtBenchError(
                f"get_full_state keeps kind='weight' only, got {kind!r}: the momentum is "
                f"stored scaled and flattened, not as the seed's per-weight velocities"
            )
        state = self.get_state()
        inputs = [i.name for i in self._train_model.graph.input if i.name not in state]
        return [None] * len(inputs) + [state[name] for name in self.weights_]

    def set_state(self, state) -> None:
        """Overwrite trained weights: a dict by name, or a list as :meth:`get_full_state`
        or :meth:`get_state` ``.values()`` give it (None entries are skipped).

        Parameters
        ----------
        state : dict or list

        Raises
        ------
        OrtBenchError
            For an unknown name, a wrong shape or a list of the wrong length.
        """
        if isinstance(state, (list, tuple)):
            values = [v for v in state if v is not None]
            if len(values) != len(self.weights_):
                raise OrtBenchError(
                    f"a state list holds {len(self.weights_)} weights ({self.weights_}), "
                    f"got {len(values)}"
                )
            state = dict(zip(self.weights_, values))
        super().set_state(state)


def _seed_loss(loss) -> BaseLearningLoss:
    """The seed's loss for a name: this module's squared error and log loss, whose
    defaults are the seed's; an object is kept as given."""
    chosen = BaseLearningLoss.select(loss)
    if chosen is loss:
        return chosen
    seed_class = {
        losses.SquareLearningLoss: SquareLearningLoss,
        losses.NegLogLearningLoss: NegLogLearningLoss,
    }.get(type(chosen))
    return chosen if seed_class is None else seed_class()


def _seed_rate(value) -> BaseLearningRate:
    """The seed's learning rate for a float or a name: this module's classes, whose
    schedules are the seed's; an object is kept as given."""
    chosen = BaseLearningRate.select(value)
    if chosen is value:
        return chosen
    seed_class = {
        learning_rates.LearningRateSGD: LearningRateSGD,
        learning_rates.LearningRateSGDNesterov: LearningRateSGDNesterov,
    }[type(chosen)]
    return seed_class(**chosen.get_params())
