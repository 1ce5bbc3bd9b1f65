"""Problems: a model, a data set, a loss and the initial weights every contender starts from.

The initial weights come from one scikit-learn reference model: an MLP fitted for one SGD
epoch from a fixed seed. scikit-learn contenders start from a copy of it, onnxruntime
contenders from its ONNX conversion, torch contenders from its weights, so on one problem
every contender trains the same function from the same point with the same loss.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cache

import numpy as np
import onnx
from skl2onnx import to_onnx
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score, r2_score
from sklearn.neural_network import MLPClassifier, MLPRegressor

from ..training import OrtBenchError
from .datasets import Split, load_split

#: name -> (hidden layer sizes, task)
_MODELS = {
    "linear": ((), "regression"),
    "mlp": ((50, 10), "regression"),
    "mlp-binary": ((50, 10), "binary"),
}
PROBLEMS = tuple(_MODELS)

#: Learning rate (constant) and momentum shared by every contender.
ETA0 = 0.001
MOMENTUM = 0.9

#: Probabilities are clipped to [EPS, 1 - EPS] in the log loss, as the engine does.
EPS = float(np.finfo(np.float32).eps)


@dataclass(frozen=True, eq=False)
class Problem:
    """One model to train on one data set, and how to score it."""

    name: str
    dataset: str
    task: str
    hidden: tuple[int, ...]
    data: Split
    reference: MLPRegressor | MLPClassifier
    onnx_model: onnx.ModelProto
    seed: int
    eta0: float = ETA0
    momentum: float = MOMENTUM

    @property
    def is_linear(self) -> bool:
        """True when the model has no hidden layer."""
        return not self.hidden

    def initial_weights(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Copies of the reference's layer coefficients and intercepts (scikit-learn layout)."""
        return (
            [c.astype(np.float32) for c in self.reference.coefs_],
            [b.astype(np.float32) for b in self.reference.intercepts_],
        )

    def steps_per_epoch(self, batch_size: int) -> int:
        return -(-len(self.data.X_train) // batch_size)

    def loss(self, y: np.ndarray, output: np.ndarray) -> float:
        """The training loss of ``output`` (values, or P(class 1) for binary problems).

        0.5 * mean((output - y)^2) for regression (scikit-learn's MLP loss), the mean log
        loss for binary problems.
        """
        output = np.asarray(output, dtype=np.float64).ravel()
        if self.task == "binary":
            p = np.clip(output, EPS, 1 - EPS)
            return float(-np.mean(np.where(np.asarray(y) == 1, np.log(p), np.log(1 - p))))
        return float(0.5 * np.mean((output - np.asarray(y, dtype=np.float64)) ** 2))

    def score(self, y: np.ndarray, output: np.ndarray) -> float:
        """R2 for regression, accuracy for binary problems."""
        output = np.asarray(output).ravel()
        if self.task == "binary":
            return float(accuracy_score(y, (output > 0.5).astype(np.int64)))
        return float(r2_score(y, output))


@cache
def make_problem(
    name: str, dataset: str = "make_regression", n_samples: int | None = None, seed: int = 0
) -> Problem:
    """Build (once per process) problem ``name`` on ``dataset``."""
    if name not in _MODELS:
        raise OrtBenchError(f"unknown problem {name!r}: expected one of {list(PROBLEMS)}")
    hidden, task = _MODELS[name]
    data = load_split(dataset, task, n_samples=n_samples, seed=seed)
    settings = dict(
        hidden_layer_sizes=hidden,
        solver="sgd",
        learning_rate="constant",
        learning_rate_init=ETA0,
        momentum=0.0,
        alpha=0.0,
        max_iter=1,
        random_state=seed,
    )
    model = MLPClassifier(**settings) if task == "binary" else MLPRegressor(**settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(data.X_train, data.y_train)
    options = {"zipmap": False} if task == "binary" else None
    onx = to_onnx(model, data.X_train[:1], options=options)
    return Problem(name, dataset, task, hidden, data, model, onx, seed)
