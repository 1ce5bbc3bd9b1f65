"""What the seed's two classes share: parameters resolved when created, the seed's repr,
labels as columns, one log line per epoch."""

from __future__ import annotations

import inspect
import logging
import warnings

import numpy as np
import onnx
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning

from ..errors import ConvergenceError, OrtBenchError
from ..graphs.shapes import inferred_shapes
from ..graphs.weights import set_initializers
from ..learning_rates import BaseLearningRate
from ..losses import BaseLearningLoss
from ..penalties import BaseLearningPenalty
from .objects import _seed_loss, _seed_rate

LOGGER = logging.getLogger("ortbench.seed")


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

    #: The seed's data loader clips a batch to the training rows without a word.
    _warns_when_clipping = False

    def set_params(self, **params):
        """Set hyper-parameters as the seed's constructor takes them: a float or a name of
        a learning rate, a loss or a penalty becomes its object, ``validation_every`` a
        number of epochs, as the constructor stores them (scikit-learn's ``clone`` and
        model selection give them so: ``GridSearchCV`` over ``learning_rate=[0.1, 0.01]``).
        """
        super().set_params(**params)
        stored = _as_seed_stored(self.get_params(deep=False))
        for name in ("learning_rate", "learning_loss", "learning_penalty", "validation_every"):
            if name in params:
                setattr(self, name, stored[name])
        return self

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
        return self

    def _weights_overflow(self, state: dict[str, np.ndarray]) -> bool:
        # the seed stopped on a loss that is not finite only: an epoch whose loss is finite
        # is kept, however large its weights
        return False

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
