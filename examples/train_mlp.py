"""Convert a scikit-learn MLPRegressor to ONNX and train it with both ortbench trainers."""

import warnings

import numpy as np
from skl2onnx import to_onnx
from sklearn.datasets import make_regression
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPRegressor

from ortbench.training import (
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    LearningRateSGDNesterov,
)

X, y = make_regression(1000, n_features=100, bias=2, random_state=0)
X, y = X.astype(np.float32), (y / 100).astype(np.float32)

# Any ONNX graph with float initializers trains; here, scikit-learn's MLP after one epoch
# (stopped there on purpose: its warning that it has not converged is expected).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    mlp = MLPRegressor(hidden_layer_sizes=(50, 10), max_iter=1, random_state=0).fit(X, y)
onx = to_onnx(mlp, X[:1])
options = dict(batch_size=15, max_iter=10, random_state=0)


def report(name, trainer):
    losses = np.round(trainer.train_losses_[-3:], 4)
    print(f"{name:<18} R2 {trainer.score(X, y):.3f} last losses {losses}")


full = FullTrainer(onx, learning_rate=LearningRateSGD(1e-3), **options).fit(X, y)
report("full training", full)

momentum = LearningRateSGDNesterov(1e-3, momentum=0.9)
fwbw = ForwardBackwardTrainer(onx, learning_rate=momentum, **options).fit(X, y)
report("forward/backward", fwbw)

trained = fwbw.get_trained_onnx()  # the same graph with the trained weights
