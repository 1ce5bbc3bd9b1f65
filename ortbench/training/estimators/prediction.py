"""What a fitted trainer answers: predictions, probabilities, scores and losses under the
trained weights, the validation loss, and the trained model and graphs exported."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime
from sklearn.metrics import accuracy_score, r2_score
from sklearn.utils.metaestimators import available_if

from ..errors import OrtBenchError
from ..graphs.loading import fit_runtime, load_model
from ..graphs.outputs import with_class_labels
from ..graphs.weights import (
    set_initializers,
    weights_as_inputs,
)
from ..runtime.devices import providers
from ..steps.batches import as_float_matrix
from .preparation import declared_features


class PredictionExport:
    """Predict, score, losses and export of a fitted trainer."""

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
        feeds = {self._input.name: X, **self._weights_by_name()}
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
        target = set_initializers(target, self._weights_by_name())
        produced = {name for node in target.graph.node for name in node.output}
        if self.is_classifier_ and self._proba_name in produced:
            target = with_class_labels(target, self._proba_name, self.classes_)
        return target

    @property
    def trained_coef_(self) -> dict[str, np.ndarray]:
        """Trained weights by name, as :meth:`get_state` returns them."""
        return self._weights_by_name()

    def _prediction_model(self) -> onnx.ModelProto:
        """The trained model predict runs (the full trainer drops a loss the model outputs)."""
        return self.get_trained_onnx()

    def _predictions(self, X) -> dict[str, np.ndarray]:
        self._check_fitted()
        self._check_feature_names(X, reset=False)
        X = as_float_matrix(X, "X")
        n_features = declared_features(self._input)
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

    def _may_classify(self) -> bool:
        """Whether the trainer is a classifier, or may be one (the model cannot be
        prepared yet): ``predict_proba`` exists on those only, as on scikit-learn's
        classifiers, so that a regressor is not taken for one."""
        return self._classifies() is not False

    @available_if(_may_classify)
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
        AttributeError
            On a regressor: like scikit-learn's, only a classifier (a classifier graph, or
            a log loss) has the method.
        OrtBenchError
            Before the first fit, or for bad data.
        """
        self._check_fitted()
        if not self.is_classifier_:
            raise OrtBenchError("predict_proba needs a classifier (a log loss)")
        return self._probabilities(self._predictions(X))

    def _probabilities(self, outputs: dict[str, np.ndarray]) -> np.ndarray:
        proba = outputs[self._proba_name or self.output_name_]
        if proba.shape[1] == 1 and len(self.classes_) == 2:
            # one Sigmoid column: the positive class's probability
            return np.hstack([1 - proba, proba])
        return proba

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
