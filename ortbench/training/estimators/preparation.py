"""The model and the data made ready for training: the model loaded, its data input,
trained output and loss chosen (a classifier's log loss on its raw scores), and the
data checked and converted (labels one-hot encoded)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from sklearn.base import clone

from ..errors import OrtBenchError
from ..graphs.batch_axis import free_batch_axis
from ..graphs.nodes import rewrite_linear_nodes
from ..graphs.outputs import (
    classifier_output,
    flattening_reshape,
    last_node,
    select_outputs,
    sigmoid_output,
    static_width,
    training_output,
)
from ..graphs.shapes import check_shapes, data_input, drop_noop_copies
from ..graphs.weights import (
    check_weight_names,
    check_weights_reach,
    get_initializers,
    reaching_weights,
    set_initializers,
)
from ..losses import BaseLearningLoss, NegLogLearningLoss, SquareLearningLoss
from ..runtime.sessions import run_once
from ..steps.batches import as_float_matrix, check_sample_weight


class ModelPreparation:
    """The model and data checks and conversions before a fit."""

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
        self._probed_width = None
        loss = self._learning_loss()
        predictions = [o.name for o in model.graph.output if o.name not in losses]
        predicting = select_outputs(model, predictions) if losses else model
        classifier = classifier_output(predicting)
        if loss is None:
            loss = NegLogLearningLoss() if classifier else SquareLearningLoss()
        if loss.is_classification and classifier is None:
            classifier = sigmoid_output(predicting)
        if loss.is_classification and classifier is not None:
            loss = self._classifier_loss(loss, classifier)
        elif isinstance(loss, NegLogLearningLoss) and loss.probability_function is None:
            self._refuse_log_probabilities(predicting)
        self.learning_loss_ = loss
        check_shapes(model, self._input, self.output_name_)
        trained_from = [self.output_name_, *losses]
        if self.weights_to_train is None:
            self._leave_out_unread_weights(model, trained_from)
        check_weights_reach(model, self.weights_, trained_from)
        self._train_model = select_outputs(model, [self.output_name_])
        self._static_width = static_width(self._train_model, self.output_name_)
        self.is_classifier_ = loss.is_classification

    def _leave_out_unread_weights(self, model: onnx.ModelProto, trained_from: list[str]) -> None:
        """Leave out of the default weights those the trained output is not computed from
        (another head of the model), with a warning naming them."""
        kept = reaching_weights(model, self.weights_, trained_from)
        if kept and len(kept) < len(self.weights_):
            unread = [w for w in self.weights_ if w not in kept]
            warnings.warn(
                f"{type(self).__name__}: {len(unread)} initializers do not reach the trained "
                f"output {trained_from[0]!r} and are not trained: {unread[:5]}",
                UserWarning,
                stacklevel=4,
            )
            self.weights_ = kept

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

    def _refuse_log_probabilities(self, model: onnx.ModelProto) -> None:
        """Refuse a LogSoftmax output under the log loss of probabilities, which would
        take the log of its logarithms (a loss of nan), in one line saying what to do."""
        node = last_node(model, self.output_name_)
        if node is not None and node.op_type == "LogSoftmax":
            raise OrtBenchError(
                f"the model's output {self.output_name_!r} is a LogSoftmax's (log-"
                f"probabilities), and the log loss reads probabilities: give "
                f"NegLogLearningLoss(probability_function='softmax'), whose softmax of them is "
                f"the probabilities (the loss torch's NLLLoss computes), or end with Softmax"
            )

    def _static_batch(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """A copy whose inputs and outputs have a batch's rows (see data.BatchLoader),
        without the nodes that copy their input unchanged (no-op Reshapes and Casts)."""
        model = set_initializers(model, {})
        for value in [*model.graph.input, *model.graph.output]:
            dims = value.type.tensor_type.shape.dim
            if value.name not in self.weights_ and len(dims) >= 1 and not dims[0].dim_value:
                dims[0].dim_value = self._batch_rows
        return drop_noop_copies(model)

    def _n_columns(self) -> int | None:
        """The columns of the trained output, declared or inferred (a classifier's
        probabilities behind a ZipMap have no declared shape), else those a run of the
        model on a row gave (:meth:`_probe_width`), or None when unknown."""
        if not hasattr(self, "_static_width"):  # a pickle from before it
            self._static_width = static_width(self._train_model, self.output_name_)
        return self._static_width or getattr(self, "_probed_width", None)

    def _probe_width(self, X: np.ndarray) -> None:
        """Where shape inference cannot tell the trained output's columns (a node it does
        not read through), run the model once on X's first row: the labels must have its
        width, never one broadcast against it in the loss."""
        if self._n_columns() is not None:
            return
        dtype = onnx.helper.tensor_dtype_to_np_dtype(self._input.type.tensor_type.elem_type)
        outputs = run_once(self._train_model, {self._input.name: X[:1].astype(dtype)})
        if outputs is not None and outputs[0].ndim == 2:
            self._probed_width = int(outputs[0].shape[1])

    def _check_feature_names(self, X, reset: bool) -> None:
        """scikit-learn's rule for a DataFrame's column names: a fit keeps them as
        ``feature_names_in_`` (``reset``); data named otherwise after it is refused, since
        the model reads its columns by position."""
        columns = getattr(X, "columns", None)
        names = None
        if columns is not None and len(columns) and all(isinstance(c, str) for c in columns):
            names = np.asarray(columns, dtype=object)
        if reset:
            if names is None:
                self.__dict__.pop("feature_names_in_", None)
            else:
                self.feature_names_in_ = names
            return
        fitted = getattr(self, "feature_names_in_", None)
        if fitted is None or names is None or np.array_equal(names, fitted):
            return
        missing = [n for n in fitted if n not in set(names)]
        extra = [n for n in names if n not in set(fitted)]
        what = (
            f"missing {missing[:3]}" * bool(missing)
            + ", " * bool(missing and extra)
            + f"not seen in fit {extra[:3]}" * bool(extra)
        ) or "the same names in another order"
        raise OrtBenchError(
            f"X's columns are not the fit's ({what}): select them as the fit saw them, "
            f"X[trainer.feature_names_in_]"
        )

    def _check_data(self, X, y, sample_weight, fitted_classes: bool):
        """Validate and convert X, y and weights; one-hot encode labels for classifiers."""
        X = as_float_matrix(X, "X")
        n_features = declared_features(self._input)
        if n_features is not None and X.shape[1] != n_features:
            raise OrtBenchError(f"X has {X.shape[1]} features, the model expects {n_features}")
        if y is None:
            raise OrtBenchError("y is required")
        y = np.asarray(y)
        if len(y) != len(X):
            raise OrtBenchError(f"X has {len(X)} rows but y has {len(y)}")
        self._probe_width(X)
        Y = self._check_labels(y, fitted_classes)
        w = None if sample_weight is None else check_sample_weight(sample_weight, len(X))
        return X, Y, w

    def _check_labels(self, y: np.ndarray, fitted_classes: bool) -> np.ndarray:
        """The labels as the loss reads them: float32 targets, or one-hot class labels for
        classifiers."""
        columns = self._n_columns()
        if self.is_classifier_:
            if y.ndim != 1:
                raise OrtBenchError(
                    f"y must be 1-D class labels for a classifier, got shape {y.shape}"
                )
            if y.dtype.kind == "f" and not np.array_equal(y, np.round(y)):
                fractional = np.unique(y[y != np.round(y)])[:3].tolist()
                raise OrtBenchError(
                    f"y holds fractional class labels ({fractional}): a classifier's labels "
                    "are integers or strings; for float targets, choose a regression loss"
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
                raise OrtBenchError("y contains NaN or infinity: drop those rows")
            if columns is not None and Y.shape[1] != columns:
                raise OrtBenchError(
                    f"y has {Y.shape[1]} columns, the model outputs {columns}"
                    + self._columns_hint(y, Y.shape[1], columns)
                )
        return Y

    def _columns_hint(self, y: np.ndarray, targets: int, columns: int) -> str:
        """What to do when y's columns are not the model's: integer labels want a
        classifier's loss; several targets flattened by a final Reshape want it gone."""
        if columns > 1 and np.issubdtype(y.dtype, np.integer):
            return ": class labels train with the log loss (NegLogLearningLoss)"
        if columns > 1 and classifier_output(self.model_) is not None:
            return (
                ": the model is a classifier, whose labels train with the log loss "
                "(leave the loss unset), or give y one column per class"
            )
        output = training_output(self._train_model)
        flattened = flattening_reshape(self._train_model, output) if columns == 1 else None
        if targets > 1 and flattened is not None:
            return (
                f": its last node reshapes {flattened!r} to (-1, 1), one column for all "
                f"targets (skl2onnx's MLPRegressor converter writes it whatever their "
                f"number); train the model without it, ending at {flattened!r} (onnx."
                f"utils.Extractor), or one target per model"
            )
        return ""

    def _one_hot(self, y: np.ndarray, width: int) -> np.ndarray:
        """Float labels of the trained output's width: one column per class, or the
        positive class alone when the model scores a binary problem with one column."""
        n_classes = len(self.classes_)
        if n_classes < 2:
            raise OrtBenchError(f"y has one class ({self.classes_[0]!r}): a classifier needs two")
        index = np.searchsorted(self.classes_, y)
        scores = getattr(self.learning_loss_, "probability_function", None) is not None
        if width == 1 and n_classes == 2 and not scores:
            raise OrtBenchError(
                f"the model's output {self.output_name_!r} has one column for 2 classes: the "
                f"log loss of one probability column needs the Sigmoid that makes it as the "
                f"output's last node (the binary loss is then computed on its scores); or "
                f"output one probability column per class"
            )
        if width == 1 and n_classes == 2:
            return np.ascontiguousarray(index.reshape(-1, 1), dtype=np.float32)
        if n_classes != width:
            outputs = (
                "one column (two classes)" if width == 1 else f"{width} columns (one per class)"
            )
            raise OrtBenchError(
                f"y has {n_classes} classes, the model outputs {outputs}: convert a "
                f"classifier fitted on {n_classes} classes"
            )
        Y = np.zeros((len(y), width), dtype=np.float32)
        Y[np.arange(len(y)), index] = 1
        return Y

    def initial_state(self) -> dict[str, np.ndarray]:
        """The weights the model came with (what a fit starts from).

        Returns
        -------
        dict of str to numpy.ndarray
            The initial value of each weight to train, by name.
        """
        model = rewrite_linear_nodes(self.model_onnx)
        return get_initializers(model, check_weight_names(model, self.weights_to_train))


def declared_features(value) -> int | None:
    dims = value.type.tensor_type.shape.dim
    if len(dims) == 2 and dims[1].dim_value > 0:
        return dims[1].dim_value
    return None
