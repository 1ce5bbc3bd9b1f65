"""A linear regression trained by both seed classes, as the seed's reference examples
compare them: the full class on the seed's summed loss, the forward/backward class on
the same data with the seed's squared error, and scikit-learn's least squares for
reference. The learning curves are drawn with matplotlib's Agg backend (nothing shown,
nothing written). ``SEED_MAX_ITER`` (environment) shortens the training for CI; the CPU
runs it, whatever device the seed's example asked for.
"""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy
import onnxruntime
from seed_models import linear_onnx
from sklearn.datasets import make_regression
from sklearn.linear_model import LinearRegression
from sklearn.metrics import mean_squared_error
from sklearn.model_selection import train_test_split

from ortbench.training.runtime.build import runtime_problem
from ortbench.training.seed import (
    LearningRateSGD,
    OrtGradientForwardBackwardOptimizer,
    OrtGradientOptimizer,
    add_loss_output,
)

MAX_ITER = int(os.environ.get("SEED_MAX_ITER", 100))

X, y = make_regression(n_samples=400, n_features=3, noise=1.0, bias=2, random_state=0)
X, y = X.astype(numpy.float32), (y / 10).astype(numpy.float32)
X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
reference = LinearRegression().fit(X_train, y_train)
onx = linear_onnx(reference)
weights = ["coef", "intercept"]

curves = {}
trained = {}
fwbw = OrtGradientForwardBackwardOptimizer(
    onx, weights, learning_rate=LearningRateSGD(1e-2), max_iter=MAX_ITER
).fit(X_train, y_train.reshape(-1, 1))
curves["forward/backward"] = fwbw.train_losses_
trained["forward/backward"] = fwbw.get_trained_onnx()
if runtime_problem() is None:  # the full class needs onnxruntime's training build
    full = OrtGradientOptimizer(
        add_loss_output(onx), weights, learning_rate=1e-2, max_iter=MAX_ITER
    ).fit(X_train, y_train.reshape(-1, 1))
    curves["full"] = full.train_losses_
    trained["full"] = full.get_trained_onnx(model=onx)  # the weights, without the loss

errors = {"scikit-learn": mean_squared_error(y_test, reference.predict(X_test))}
for name, model in trained.items():
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    predicted = session.run(None, {"X": X_test})[0].ravel()
    errors[name] = mean_squared_error(y_test, predicted)
for name, error in errors.items():
    print(f"{name}: test mean squared error {error:.4f}")

fig, ax = plt.subplots(1, 1, figsize=(5, 3))
for name, curve in curves.items():
    ax.plot(curve, label=name)
ax.set_xlabel("epoch")
ax.set_ylabel("training loss")
ax.set_yscale("log")
ax.legend()
plt.close(fig)
