"""The fit loop and estimator plumbing both trainers share.

A trainer subclass prepares its model and chooses its step object
(:meth:`BaseTrainer._build`, see :mod:`ortbench.training.steps.protocol`), which builds the graphs,
binds them over the staged batches and runs the epochs; everything else (input checks,
batching, learning-rate schedule, divergence, validation, state, predict, score, export)
is here.
"""

from __future__ import annotations

import os
import textwrap
import time
import warnings

import numpy as np
import onnx
import onnxruntime
from sklearn.base import BaseEstimator, clone
from sklearn.metrics import accuracy_score, r2_score

from ...progress import Progress
from ..errors import ConvergenceError, NotFittedTrainerError, OrtBenchError
from ..gradients.derivative import choose_backend
from ..graphs.batch_axis import free_batch_axis
from ..graphs.loading import fit_runtime, load_model
from ..graphs.nodes import rewrite_linear_nodes
from ..graphs.outputs import classifier_output, select_outputs, training_output, with_class_labels
from ..graphs.shapes import check_shapes, data_input, drop_noop_reshapes
from ..graphs.weights import (
    check_weight_names,
    check_weights_reach,
    get_initializers,
    set_initializers,
    weights_as_inputs,
)
from ..learning_rates import BaseLearningRate, LearningRateAdamW, LearningRateSGD
from ..losses import BaseLearningLoss, NegLogLearningLoss, SquareLearningLoss
from ..runtime.build import quiet_logs
from ..runtime.devices import check_device, providers
from ..runtime.sessions import SessionMaker
from ..steps.batches import BatchLoader, as_float_matrix, check_sample_weight
from ..steps.protocol import Steps

#: Steps below this much work (batch size x trained values, about the multiply-adds of a
#: forward pass) run on one intra-op thread when ``intra_op_threads='auto'``, above it on
#: onnxruntime's pool, whose threads spin between kernels: below it handing kernels to
#: the pool costs more than it saves (measured on 2 cores, ``benchmarks/README.md``).
ONE_THREAD_WORK = 2**19
#: The same limit for step objects that run two large sessions in turn (the portable
#: forward and gradient sessions): their pools do not spin, since each pool's spinning
#: threads would hold the cores the other pool's kernels need, and a pool that does not
#: spin wins only from larger steps.
TWO_POOLS_ONE_THREAD_WORK = 2**23


#: numpydoc entries both trainers share, put into their docstrings by
#: :func:`shared_docstring` where ``{model_parameters}``, ``{fit_parameters}`` and
#: ``{attributes}`` stand.
SHARED_DOC = {
    "model_parameters": """\
model_onnx : onnx.ModelProto, bytes or path
    The model to train: one data input, float outputs (a classifier's probabilities
    may sit behind a ZipMap). Linear scikit-learn nodes are rewritten into trainable
    MatMul/Add first.
weights_to_train : list of str, optional
    The initializers to train; by default every float initializer that is a parameter
    (see :func:`~ortbench.training.trainable_initializers`).""",
    "fit_parameters": """\
batch_size : int, default=10
    Rows per step; the last batch of an epoch is padded with rows of weight 0.
max_iter : int, default=100
    Epochs per call to :meth:`fit`.
device : str, default='cpu'
    ``'cpu'``, ``'cuda'`` or ``'cuda:N'``.
shuffle : bool, default=True
    Shuffle the rows before every epoch.
random_state : int, RandomState or None, default=None
    Seeds the shuffling.
warm_start : bool, default=False
    A new :meth:`fit` continues from the current weights, optimizer state and schedule.
verbose : int, default=0
    Print the loss of every epoch on stderr.
validation_every : int, default=1
    Epochs between two scores of the validation data given to :meth:`fit`.
intra_op_threads : 'auto', int or None, default='auto'
    Intra-op threads of the sessions that run the model: ``'auto'`` runs small steps
    (batch size times trained values below ``ONE_THREAD_WORK``, or
    ``TWO_POOLS_ONE_THREAD_WORK`` for the portable forward/backward steps) on one
    thread and larger ones on onnxruntime's default pool, None that pool at any size.
    Pool threads spin between kernels, but in the portable forward/backward steps; the
    small loss and update sessions always run on one thread.""",
    "attributes": """\
model_ : onnx.ModelProto
    The model as trained (linear nodes rewritten).
weights_ : list of str
    The trained weights.
output_name_ : str
    The output the loss reads.
is_classifier_ : bool
    Whether the loss is a log loss (labels are one-hot encoded).
classes_ : numpy.ndarray
    The class labels (classifiers only).
learning_rate_ : BaseLearningRate
    The fitted schedule (a clone of ``learning_rate``).
t_ : int
    Samples seen so far.
train_losses_ : list of float
    The training loss of every epoch (mean over samples, penalty included).
validation_losses_ : list of float
    The validation loss, every ``validation_every`` epochs.
n_iter_ : int
    Epochs run.""",
}


def shared_docstring(cls: type) -> type:
    """Put the :data:`SHARED_DOC` entries into the docstring of the trainer ``cls``."""
    doc = cls.__doc__
    for name, text in SHARED_DOC.items():
        doc = doc.replace("{" + name + "}", textwrap.indent(text, "    ").lstrip())
    cls.__doc__ = doc
    return cls


class BaseTrainer(BaseEstimator):
    """Shared estimator API: fit, predict, score, state and export."""

    #: The step object of the last build (see :mod:`ortbench.training.steps.protocol`).
    _steps: Steps

    def _keep_params(self, params: dict) -> None:
        """Store the constructor's arguments (its ``locals()``) unchanged, one attribute
        each, as scikit-learn expects of an estimator's ``__init__``."""
        for name in self._get_param_names():
            setattr(self, name, params[name])

    def _learning_loss(self) -> BaseLearningLoss | None:
        """The loss the user chose (checked), or None for the default: the log loss for a
        classifier graph, the squared error otherwise."""
        raise NotImplementedError

    def _steps_class(self) -> type[Steps]:
        """The class of the step object this trainer runs on its backend."""
        raise NotImplementedError

    def _build(self) -> None:
        """Build the graphs and the step object ``self._steps`` from ``self.model_``."""
        raise NotImplementedError

    def _run_epoch(self, loader: BatchLoader) -> float:
        """Train on every batch of the loader's next epoch; return the epoch loss."""
        loader.epoch()
        return self._steps.run_epoch()

    def get_state(self) -> dict[str, np.ndarray]:
        """The trained weights.

        Returns
        -------
        dict of str to numpy.ndarray
            Copies of the current weights, by name.

        Raises
        ------
        OrtBenchError
            Before the first fit.
        """
        self._check_fitted()
        return self._steps.get_state()

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Overwrite trained weights by name.

        Parameters
        ----------
        state : dict of str to array-like
            New values of some or all of the trained weights, with their shapes.

        Raises
        ------
        OrtBenchError
            Before the first fit, for an unknown weight or a wrong shape.
        """
        self._check_fitted()
        for name, array in state.items():
            if name not in self.weights_:
                raise OrtBenchError(f"unknown weight {name!r}: trained weights are {self.weights_}")
            if not np.isfinite(array).all():
                raise OrtBenchError(f"weight {name!r} contains NaN or infinity")
            expected = self._steps.shape(name)
            array = np.ascontiguousarray(array, dtype=np.float32)
            if array.shape != expected:
                raise OrtBenchError(f"weight {name!r} has shape {expected}, got {array.shape}")
            self._steps.set(name, array)
        self._predictor = None

    # -- pickling ----------------------------------------------------------------------

    #: Private attributes a pickle keeps: every other one (sessions, bindings, buffers)
    #: is rebuilt on first use from the hyper-parameters and the fitted attributes.
    _PICKLED_PRIVATE = frozenset(("_sklearn_version", "_y_1d", "_pickled_state", "_fitted_model"))

    def __getstate__(self) -> dict:
        """The hyper-parameters, the fitted attributes, and a snapshot of the weights and
        optimizer state; no onnxruntime object."""
        state = {
            k: v
            for k, v in super().__getstate__().items()
            if not k.startswith("_") or k in self._PICKLED_PRIVATE
        }
        if "_pickled_state" not in state and self._has_trained_state():
            optimizer_state = self._steps.get_optimizer_state()
            state["_pickled_state"] = (self.get_state(), optimizer_state, self._built_key)
        return state

    def _restore_pickled(self) -> None:
        """Rebuild sessions and buffers of an unpickled trainer around its snapshot."""
        pickled = self.__dict__.pop("_pickled_state", None)
        if pickled is None:
            return
        weights, optimizer_state, built_key = pickled
        fitted = {k: v for k, v in vars(self).items() if k.endswith("_") and k[0] != "_"}
        self._check_params()
        self._prepare_model()
        vars(self).update(fitted)
        self._build_around(weights, optimizer_state)
        self._built_key = built_key

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        """scikit-learn's repr, with the model summarised instead of printed as protobuf text."""
        model = self.model_onnx
        if isinstance(model, onnx.ModelProto):
            summary = _ModelSummary(model)
            try:
                self.model_onnx = summary
                return super().__repr__(N_CHAR_MAX)
            finally:
                self.model_onnx = model
        return super().__repr__(N_CHAR_MAX)

    # -- fit ---------------------------------------------------------------------------

    def fit(self, X, y, sample_weight=None, X_val=None, y_val=None, sample_weight_val=None):
        """Train on (X, y) for ``max_iter`` epochs.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets, or class labels for a classifier.
        sample_weight : array-like of shape (n_samples,), optional
            Non-negative weights of the rows.
        X_val, y_val, sample_weight_val : array-like, optional
            Validation data, scored every ``validation_every`` epochs into
            ``validation_losses_``.

        Returns
        -------
        self
            The fitted trainer.

        Raises
        ------
        OrtBenchError
            For bad parameters or data, or a diverging loss or weights (``get_state()``
            then holds the weights from before the epoch that diverged).

        Notes
        -----
        With ``warm_start=True`` a fitted trainer continues from its weights and
        optimizer state. Hyper-parameters changed since (``set_params``) are honoured:
        the graphs are rebuilt around the weights, and a new learning rate starts its
        schedule where the previous one was; an optimizer state (momentum) restarts from
        zero then, with a warning.
        """
        self._check_params()
        warm = self.warm_start and self._has_trained_state()
        if warm and not _same_model(self.model_onnx, getattr(self, "_fitted_model", None)):
            warnings.warn(
                f"{type(self).__name__}: warm start does not apply, model_onnx changed since "
                f"the last fit: training starts from the new model's weights",
                UserWarning,
                stacklevel=2,
            )
            self.__dict__.pop("_pickled_state", None)
            warm = False
        if warm:
            self._restore_pickled()
        rebuild = not warm or self._build_key() != self._built_key
        if rebuild:
            state = self.get_state() if warm else None
            optimizer_state = self._kept_optimizer_state() if warm else None
            self._prepare_model()
            self._fitted_model = self.model_onnx
        X, Y, w = self._check_data(X, y, sample_weight, fitted_classes=warm)
        val = None
        if X_val is not None:
            val = self._check_data(X_val, y_val, sample_weight_val, fitted_classes=True)
        if not warm:
            self.learning_rate_ = self._new_learning_rate()
            self.t_ = 0
            self.train_losses_ = []
            self.validation_losses_ = []
        elif repr(self.learning_rate_) != repr(self._new_learning_rate()):
            # the schedule goes on from the samples seen, at the new hyper-parameters
            self.learning_rate_ = self._new_learning_rate()
            if self.t_:
                self.learning_rate_.update_learning_rate(self.t_)
        if rebuild:
            self._build_around(state, optimizer_state)
        self._steps.set_learning_rate(self._step_rate(0))
        if w is None:
            w = np.ones(len(X), dtype=np.float32)
        loader = self._loader_for([X, Y, w], reuse=warm and not rebuild)
        self._predictor = None
        start = time.perf_counter()
        snapshot = self.get_state()
        for epoch in range(1, self.max_iter + 1):
            loss = float(self._run_epoch(loader))
            state = self.get_state()
            if not np.isfinite(loss) or not all(map(_moderate, state.values())):
                self._diverged(epoch, loss, snapshot)
            snapshot = state
            self.train_losses_.append(loss)
            self.t_ += loader.n_samples
            self._steps.set_learning_rate(self._step_rate(epoch))
            if val is not None and (epoch % self.validation_every == 0 or epoch == self.max_iter):
                self.validation_losses_.append(self._validation_loss(*val))
            if self.verbose:
                self._report(epoch, loss, time.perf_counter() - start)
        self.n_iter_ = len(self.train_losses_)
        return self

    def _step_rate(self, epoch: int) -> float:
        """The rate the steps use after ``epoch`` epochs of this fit (0: its first epoch's);
        the schedule's ``t`` is ``self.t_``, the samples seen."""
        if epoch:
            self.learning_rate_.update_learning_rate(self.t_)
        return self.learning_rate_.value

    def _diverged(self, epoch: int, loss: float, snapshot: dict[str, np.ndarray]) -> None:
        """Restore the weights from before ``epoch`` and raise the divergence error; the
        optimizer state, no longer finite either, restarts at the next warm start."""
        self.set_state(snapshot)
        self._built_key = None
        what = f"the loss is {loss}"
        if np.isfinite(loss):
            what = "its last update left weights whose squares overflow float32"
        raise ConvergenceError(
            f"training diverged at epoch {epoch}: {what}; get_state() holds the weights "
            f"from before that epoch (lower the learning rate)"
        )

    def _new_learning_rate(self) -> BaseLearningRate:
        rate = clone(self.learning_rate or LearningRateSGD())
        return rate.init_learning_rate()

    #: Hyper-parameters that do not change the graphs: a warm start keeps them built.
    _RUN_PARAMS = frozenset(
        (
            "model_onnx",
            "max_iter",
            "verbose",
            "warm_start",
            "validation_every",
            "random_state",
            "shuffle",
        )
    )

    def _build_key(self) -> str:
        """What the graphs were built for: every other hyper-parameter, as text."""
        params = self.get_params(deep=True)
        return repr(sorted((k, repr(v)) for k, v in params.items() if k not in self._RUN_PARAMS))

    def _has_trained_state(self) -> bool:
        """Whether a previous fit left weights to continue from (fitted or unpickled)."""
        return hasattr(self, "train_losses_") and (
            hasattr(self, "_built_key") or hasattr(self, "_pickled_state")
        )

    def _kept_optimizer_state(self):
        """The optimizer state a rebuild carries over: None (restart at zero) when the
        learning rate changed or training diverged."""
        if self._built_key is None or repr(self.learning_rate_) != repr(self._new_learning_rate()):
            if self.learning_rate_.n_states:
                warnings.warn(
                    f"{type(self).__name__}: the optimizer state (momentum) restarts from "
                    f"zero with the new hyper-parameters",
                    UserWarning,
                    stacklevel=3,
                )
            return None
        return self._steps.get_optimizer_state()

    def _build_around(self, state, optimizer_state) -> None:
        """Build the graphs and sessions, then load weights and optimizer state into them."""
        spinning = self._steps_class().large_sessions == 1
        self._sessions = SessionMaker(
            self.device, self._choose_threads(), type(self).__name__, spinning
        )
        quiet_logs()
        self._build()
        self._built_key = self._build_key()
        self._loader = None
        if state is not None:
            if isinstance(self.learning_rate_, LearningRateAdamW):
                warnings.warn(
                    f"{type(self).__name__}: AdamW's moments stay inside onnxruntime and "
                    f"restart from zero when the graphs are rebuilt (warm start with new "
                    f"hyper-parameters, or an unpickled trainer)",
                    UserWarning,
                    stacklevel=3,
                )
            self.set_state(state)
        if optimizer_state is not None:
            self._steps.set_optimizer_state(optimizer_state)
        self._predictor = None

    def _loader_for(self, arrays: list[np.ndarray], reuse: bool) -> BatchLoader:
        """The staged batches: the previous fit's, refilled, when a warm start allows it.

        Keeping the loader keeps every binding made over its buffers, which makes a
        warm-started fit start as fast as the next epoch of the previous one.
        """
        loader = getattr(self, "_loader", None)
        same = (
            reuse
            and loader is not None
            and self._loader_batch_size == self.batch_size
            and loader.shuffle == self.shuffle
            and loader.refill(arrays)
        )
        if not same:
            loader = BatchLoader(
                arrays, self.batch_size, self.device, self.shuffle, self.random_state
            )
            self._loader, self._loader_batch_size = loader, self.batch_size
            self._steps.start_fit(loader)
        return loader

    def _report(self, epoch: int, loss: float, elapsed: float) -> None:
        """Show an epoch: a bar on a terminal, one line per epoch otherwise."""
        if epoch == 1:
            self._progress = Progress(self.max_iter, type(self).__name__, "epoch")
        extra = f" val={self.validation_losses_[-1]:.6g}" if self.validation_losses_ else ""
        self._progress.step(f"loss={loss:.6g}{extra} lr={self.learning_rate_.value:.3g}", elapsed)

    def _check_params(self) -> None:
        self._backend = choose_backend(self.backend)
        check_device(self.device, self._backend)
        for name in ("batch_size", "max_iter", "validation_every"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise OrtBenchError(f"{name} must be an integer >= 1, got {value!r}")
        rate = self.learning_rate
        if rate is not None and not isinstance(rate, BaseLearningRate):
            raise OrtBenchError(
                f"learning_rate must be a LearningRateSGD-like object, got {type(rate).__name__}"
            )
        (rate or LearningRateSGD()).check()

    def _choose_threads(self) -> int | None:
        threads = self.intra_op_threads
        if threads == "auto":
            inits = self.model_.graph.initializer
            values = sum(int(np.prod(i.dims)) for i in inits if i.name in self.weights_)
            pools = self._steps_class().large_sessions
            limit = ONE_THREAD_WORK if pools == 1 else TWO_POOLS_ONE_THREAD_WORK
            return 1 if self.batch_size * values < limit else None
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise OrtBenchError(f"intra_op_threads must be 'auto', None or >= 1, got {threads!r}")
        return threads

    # -- model and data ------------------------------------------------------------------

    def _prepare_model(self) -> None:
        """Load the model and decide what to train through, with which loss."""
        model = rewrite_linear_nodes(self.model_onnx)
        self.weights_ = check_weight_names(model, self.weights_to_train)
        losses = self._loss_outputs(model)
        model, self._input = data_input(model, self.weights_, losses)
        model = free_batch_axis(model, self._input.name)
        self._input = next(i for i in model.graph.input if i.name == self._input.name)
        self.model_ = model
        self.output_name_ = training_output(model, losses)
        self._proba_name = None
        self._label_columns = None
        loss = self._learning_loss()
        predictions = [o.name for o in model.graph.output if o.name not in losses]
        classifier = classifier_output(select_outputs(model, predictions) if losses else model)
        if loss is None:
            loss = NegLogLearningLoss() if classifier else SquareLearningLoss()
        if loss.is_classification and classifier is not None:
            loss = self._classifier_loss(loss, classifier)
        self.learning_loss_ = loss
        check_shapes(model, self._input, self.output_name_)
        check_weights_reach(model, self.weights_, [self.output_name_, *losses])
        self._train_model = select_outputs(model, [self.output_name_])
        self.is_classifier_ = loss.is_classification

    def _loss_outputs(self, model: onnx.ModelProto) -> tuple[str, ...]:
        """Outputs of the model that are a loss, not a prediction (none here)."""
        return ()

    def _classifier_loss(self, loss: BaseLearningLoss, classifier) -> BaseLearningLoss:
        """The log loss on the raw scores behind a classifier's probabilities."""
        name = classifier.probabilities
        if classifier.function is None:
            raise OrtBenchError(
                f"the classifier's output {name!r} holds decision scores, not probabilities "
                f"(no Sigmoid or Softmax makes it, as for SGDClassifier(loss='hinge')): the "
                f"log loss cannot train it; convert a classifier that has predict_proba"
            )
        wanted = getattr(loss, "probability_function", None)
        if wanted is None and isinstance(loss, NegLogLearningLoss):
            loss = clone(loss).set_params(probability_function=classifier.function)
        elif wanted != classifier.function:
            raise OrtBenchError(
                f"the model turns scores into probabilities with a {classifier.function}, "
                f"not probability_function={wanted!r}: leave it None or set "
                f"{classifier.function!r}"
            )
        self.output_name_ = classifier.scores
        self._proba_name = name
        self._label_columns = classifier.columns
        return loss

    def _static_batch(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """A copy whose inputs and outputs have ``batch_size`` rows (see data.BatchLoader),
        without the Reshape nodes that static shapes make no-ops."""
        model = set_initializers(model, {})
        for value in [*model.graph.input, *model.graph.output]:
            dims = value.type.tensor_type.shape.dim
            if value.name not in self.weights_ and len(dims) >= 1 and not dims[0].dim_value:
                dims[0].dim_value = self.batch_size
        return drop_noop_reshapes(model)

    def _n_columns(self) -> int | None:
        for value in list(self._train_model.graph.output):
            dims = value.type.tensor_type.shape.dim
            if len(dims) == 2 and dims[1].dim_value > 0:
                return dims[1].dim_value
        return None

    def _check_data(self, X, y, sample_weight, fitted_classes: bool):
        """Validate and convert X, y and weights; one-hot encode labels for classifiers."""
        X = as_float_matrix(X, "X")
        n_features = _declared_features(self._input)
        if n_features is not None and X.shape[1] != n_features:
            raise OrtBenchError(f"X has {X.shape[1]} features, the model expects {n_features}")
        if y is None:
            raise OrtBenchError("y is required")
        y = np.asarray(y)
        if len(y) != len(X):
            raise OrtBenchError(f"X has {len(X)} rows but y has {len(y)}")
        columns = self._n_columns()
        if self.is_classifier_:
            if y.ndim != 1:
                raise OrtBenchError(
                    f"y must be 1-D class labels for a classifier, got shape {y.shape}"
                )
            if not fitted_classes:
                self.classes_ = np.unique(y)
            unknown = np.setdiff1d(y, self.classes_)
            if unknown.size:
                raise OrtBenchError(f"y has labels {unknown[:5].tolist()} not seen when fitting")
            Y = self._one_hot(y, self._label_columns or columns or len(self.classes_))
        else:
            if not np.issubdtype(y.dtype, np.number):
                raise OrtBenchError(f"y must be numeric, got dtype {y.dtype}")
            if y.ndim not in (1, 2):
                raise OrtBenchError(f"y must be 1-D or 2-D, got shape {y.shape}")
            if not fitted_classes:
                self._y_1d = y.ndim == 1
            Y = np.ascontiguousarray(y.reshape(len(y), -1), dtype=np.float32)
            if not np.isfinite(Y).all():
                raise OrtBenchError("y contains NaN or infinity")
            if columns is not None and Y.shape[1] != columns:
                raise OrtBenchError(
                    f"y has {Y.shape[1]} columns, the model outputs {columns}"
                    + (
                        ": class labels train with the log loss (NegLogLearningLoss)"
                        if columns > 1 and np.issubdtype(y.dtype, np.integer)
                        else ""
                    )
                )
        w = None if sample_weight is None else check_sample_weight(sample_weight, len(X))
        return X, Y, w

    def _one_hot(self, y: np.ndarray, width: int) -> np.ndarray:
        """Float labels of the trained output's width: one column per class, or the
        positive class alone when the model scores a binary problem with one column."""
        n_classes = len(self.classes_)
        if n_classes < 2:
            raise OrtBenchError(f"y has one class ({self.classes_[0]!r}): a classifier needs two")
        index = np.searchsorted(self.classes_, y)
        if width == 1 and n_classes == 2:
            return np.ascontiguousarray(index.reshape(-1, 1), dtype=np.float32)
        if n_classes != width:
            raise OrtBenchError(
                f"y has {n_classes} classes, the model outputs {width} columns (one per "
                f"class): convert a classifier fitted on {n_classes} classes"
            )
        Y = np.zeros((len(y), width), dtype=np.float32)
        Y[np.arange(len(y)), index] = 1
        return Y

    # -- evaluation ----------------------------------------------------------------------

    def _validation_loss(self, X, Y, w) -> float:
        """Loss on held-out data, without penalty, through the trainer's own loss graph."""
        if getattr(self, "_val_sessions", None) is None:
            options = self._sessions.options("validation")
            forward = weights_as_inputs(self._train_model, self.weights_)
            loss = self.learning_loss_.build_onnx_function()
            self._val_sessions = (
                onnxruntime.InferenceSession(
                    fit_runtime(forward).SerializeToString(),
                    options,
                    providers=providers(self.device),
                ),
                onnxruntime.InferenceSession(
                    fit_runtime(loss).SerializeToString(), options, providers=providers(self.device)
                ),
            )
        forward, loss = self._val_sessions
        feeds = {self._input.name: X, **self.get_state()}
        predicted = forward.run(None, feeds)[0]
        weights = w if w is not None else np.ones(len(X), dtype=np.float32)
        scale = (weights / weights.sum()).reshape(-1, 1)
        feeds = {"expected": Y, "predicted": predicted, "loss_scale": scale, "grad_scale": scale}
        return float(loss.run(["loss"], feeds)[0])

    def losses(self, X, y, sample_weight=None) -> np.ndarray:
        """Each sample's loss under the trained weights, through the trainer's loss.

        Parameters
        ----------
        X : array-like (n, features)
        y : array-like, as for :meth:`fit`
        sample_weight : array-like (n,), optional
            Multiplies each row's loss.

        Returns
        -------
        numpy.ndarray (n,)
            The loss term of each row summed over its outputs, times its sample weight
            when given: no mean over rows, no penalty.

        Raises
        ------
        OrtBenchError
            Before fit, or for data fit would refuse.
        """
        self._check_fitted()
        X, Y, w = self._check_data(X, y, sample_weight, fitted_classes=True)
        if getattr(self, "_samples_session", None) is None:
            model = self.learning_loss_.build_samples_function()
            self._samples_session = onnxruntime.InferenceSession(
                fit_runtime(model).SerializeToString(), providers=providers(self.device)
            )
        predicted = self._predictions(X)[self.output_name_]
        feeds = {"expected": Y, "predicted": predicted.reshape(Y.shape)}
        per_row = self._samples_session.run(None, feeds)[0]
        return per_row if w is None else per_row * w

    def get_trained_onnx(self, model=None) -> onnx.ModelProto:
        """The model as given (linear nodes rewritten) with the trained weights.

        Parameters
        ----------
        model : onnx.ModelProto, bytes or path, optional
            Another model holding the trained initializers (the seed's way to put them
            in the model without its loss); the trainer's own by default.

        Returns
        -------
        onnx.ModelProto
            A copy; the trainer's model is unchanged.

        Raises
        ------
        OrtBenchError
            Before the first fit.
        """
        self._check_fitted()
        target = self.model_ if model is None else load_model(model)
        missing = set(self.weights_) - {i.name for i in target.graph.initializer}
        if missing:
            raise OrtBenchError(f"model has no initializers {sorted(missing)} to hold the weights")
        target = set_initializers(target, self.get_state())
        produced = {name for node in target.graph.node for name in node.output}
        if self.is_classifier_ and self._proba_name in produced:
            target = with_class_labels(target, self._proba_name, self.classes_)
        return target

    @property
    def trained_coef_(self) -> dict[str, np.ndarray]:
        """Trained weights by name, as :meth:`get_state` returns them."""
        return self.get_state()

    def _prediction_model(self) -> onnx.ModelProto:
        """The trained model predict runs (the full trainer drops a loss the model outputs)."""
        return self.get_trained_onnx()

    def __sklearn_is_fitted__(self) -> bool:
        """True once a fit has built the trainer's steps, or for an unpickled fitted
        trainer (scikit-learn's fitted check)."""
        return hasattr(self, "_steps") or hasattr(self, "_pickled_state")

    def _check_fitted(self) -> None:
        self._restore_pickled()
        if not self.__sklearn_is_fitted__():
            raise NotFittedTrainerError(
                f"this {type(self).__name__} is not fitted yet: call fit first"
            )

    def _predictions(self, X) -> dict[str, np.ndarray]:
        self._check_fitted()
        X = as_float_matrix(X, "X")
        n_features = _declared_features(self._input)
        if n_features is not None and X.shape[1] != n_features:
            raise OrtBenchError(f"X has {X.shape[1]} features, the model expects {n_features}")
        if getattr(self, "_predictor", None) is None:
            model = self._prediction_model()
            for name in (self.output_name_, self._proba_name):
                if name and name not in [o.name for o in model.graph.output]:
                    # trained through a tensor behind ZipMap or a Sigmoid: expose it too
                    model.graph.output.append(
                        onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                    )
            self._predictor = onnxruntime.InferenceSession(
                fit_runtime(model).SerializeToString(), providers=providers(self.device)
            )
            self._predicted_names = [
                o.name for o in self._predictor.get_outputs() if o.type.startswith("tensor")
            ]
        names = self._predicted_names
        return dict(zip(names, self._predictor.run(names, {self._input.name: X})))

    def predict(self, X) -> np.ndarray:
        """Predict with the trained weights.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The data.

        Returns
        -------
        numpy.ndarray
            Class labels for a classifier, else the trained output (1-D when the
            targets were).

        Raises
        ------
        OrtBenchError
            Before the first fit, or for bad data.
        """
        outputs = self._predictions(X)
        if self.is_classifier_:
            proba = self._probabilities(outputs)
            return self.classes_[np.argmax(proba[:, : len(self.classes_)], axis=1)]
        predicted = outputs[self.output_name_]
        return predicted.ravel() if self._y_1d and predicted.shape[1] == 1 else predicted

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The data.

        Returns
        -------
        numpy.ndarray of shape (n_samples, n_classes)
            The trained output.

        Raises
        ------
        OrtBenchError
            When the trainer is not a classifier (a log loss), before the first fit, or
            for bad data.
        """
        self._check_fitted()
        if not self.is_classifier_:
            raise OrtBenchError("predict_proba needs a classifier (a log loss)")
        return self._probabilities(self._predictions(X))

    def _probabilities(self, outputs: dict[str, np.ndarray]) -> np.ndarray:
        return outputs[self._proba_name or self.output_name_]

    def score(self, X, y, sample_weight=None) -> float:
        """Accuracy for classifiers, R² for regressors, as scikit-learn defines them.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The data.
        y : array-like
            True labels or targets.
        sample_weight : array-like of shape (n_samples,), optional
            Weights of the rows.

        Returns
        -------
        float
            The score.
        """
        self._check_fitted()
        if self.is_classifier_:
            return float(accuracy_score(y, self.predict(X), sample_weight=sample_weight))
        return float(r2_score(y, self.predict(X), sample_weight=sample_weight))

    def save_onnx_graph(self, folder: str | os.PathLike) -> dict[str, str]:
        """Write every graph the trainer runs into ``folder``.

        Parameters
        ----------
        folder : str or os.PathLike
            Created when missing; files ``<name>.onnx`` are overwritten.

        Returns
        -------
        dict of str to str
            The path of each graph, by name.

        Raises
        ------
        OrtBenchError
            Before the first fit, or when ``folder`` cannot be created (a file is there).
        """
        self._check_fitted()
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            reason = "a file is there" if os.path.isfile(folder) else e.strerror or e
            raise OrtBenchError(f"cannot write the graphs into folder {folder}: {reason}") from None
        paths = {}
        for name, model in self._graphs().items():
            path = os.path.join(os.fspath(folder), f"{name}.onnx")
            with open(path, "wb") as f:
                f.write(model if isinstance(model, bytes) else model.SerializeToString())
            paths[name] = path
        return paths

    def _graphs(self) -> dict:
        return dict(self._steps.graphs)

    def initial_state(self) -> dict[str, np.ndarray]:
        """The weights the model came with (what a fit starts from).

        Returns
        -------
        dict of str to numpy.ndarray
            The initial value of each weight to train, by name.
        """
        model = rewrite_linear_nodes(self.model_onnx)
        return get_initializers(model, check_weight_names(model, self.weights_to_train))


class _ModelSummary:
    def __init__(self, model: onnx.ModelProto):
        self.text = f"<ModelProto {model.graph.name!r}: {len(model.graph.node)} nodes>"

    def __repr__(self) -> str:
        return self.text


def _same_model(model, fitted) -> bool:
    """Whether ``model_onnx`` is still the model of the last fit: the same object, or an
    equal one (protobuf messages compare by content, paths and bytes by value)."""
    return model is fitted or (type(model) is type(fitted) and model == fitted)


def _declared_features(value) -> int | None:
    dims = value.type.tensor_type.shape.dim
    if len(dims) == 2 and dims[1].dim_value > 0:
        return dims[1].dim_value
    return None


def _moderate(weight: np.ndarray) -> bool:
    """Whether the squared norm of a weight is finite in float32: no NaN, no infinity, and
    no value so large (beyond about 1e19) that the next forward pass would overflow."""
    flat = weight.ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.dot(flat, flat)))
