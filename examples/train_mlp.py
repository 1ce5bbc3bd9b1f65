"""Convert a scikit-learn MLPRegressor to ONNX and train it with both ortbench trainers."""

import numpy as np
from skl2onnx import to_onnx
from sklearn.datasets import make_regression
from sklearn.neural_network import MLPRegressor

from ortbench.training import (
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    LearningRateSGDNesterov,
)

X, y = make_regression(1000, n_features=100, bias=2, random_state=0)
X, y = X.astype(np.float32), (y / 100).astype(np.float32)

# Any ONNX graph with float initializers trains; here, scikit-learn's MLP after one epoch.
mlp = MLPRegressor(hidden_layer_sizes=(50, 10), max_iter=1, random_state=0).fit(X, y)
onx = to_onnx(mlp, X[:1])

full = FullTrainer(onx, learning_rate=LearningRateSGD(1e-3), batch_size=15, max_iter=10)
full.fit(X, y)
print("full training      R2", round(full.score(X, y), 3), "losses", full.train_losses_[-3:])

fwbw = ForwardBackwardTrainer(
    onx, learning_rate=LearningRateSGDNesterov(1e-3, momentum=0.9), batch_size=15, max_iter=10
)
fwbw.fit(X, y)
print("forward/backward   R2", round(fwbw.score(X, y), 3), "losses", fwbw.train_losses_[-3:])

trained = fwbw.get_trained_onnx()  # the same graph with the trained weights
