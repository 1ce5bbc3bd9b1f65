"""A small neural network trained by the seed's classes, as the seed's reference
examples on neural networks do, on the CPU.

A scikit-learn ``MLPRegressor`` is trained first; skl2onnx converts it, and the ONNX
copy is trained again from random weights three ways: the full class on the seed's
summed squared error, the forward/backward class with plain SGD, and the forward/backward
class with Nesterov momentum and an L2 penalty. The examples written for a GPU pick
``device='cuda'`` when onnxruntime sees one; this one asks for ``'cpu'``, their CPU path.

The loss curves are drawn with matplotlib's Agg backend into ``SEED_OUT`` (environment;
a new temporary folder otherwise), with the graphs ``save_onnx_graph`` writes.
``SEED_MAX_ITER`` (environment) shortens the trainings for CI.
"""

import os
import tempfile
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy
import onnxruntime
from skl2onnx import to_onnx
from sklearn.datasets import make_regression
from sklearn.metrics import mean_squared_error
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPRegressor

from ortbench.training import ElasticLearningPenalty
from ortbench.training.graphs.weights import onnx_rename_weights
from ortbench.training.runtime.build import runtime_problem
from ortbench.training.seed import (
    LearningRateSGDNesterov,
    OrtGradientForwardBackwardOptimizer,
    OrtGradientOptimizer,
    add_loss_output,
    get_train_initializer,
)

MAX_ITER = int(os.environ.get("SEED_MAX_ITER", 50))
OUT = os.environ.get("SEED_OUT") or tempfile.mkdtemp(prefix="seed-nn-")
DEVICE = "cpu"

X, y = make_regression(n_samples=600, n_features=10, noise=5.0, bias=2, random_state=0)
X, y = X.astype(numpy.float32), (y / 100).astype(numpy.float32)
X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)

nn = MLPRegressor(
    hidden_layer_sizes=(10, 10),
    solver="sgd",
    learning_rate_init=1e-3,
    batch_size=10,
    max_iter=MAX_ITER,
    n_iter_no_change=MAX_ITER * 3,
    random_state=0,
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # stopped before convergence, on purpose
    nn.fit(X_train, y_train)

# The weights are the converted model's initializers; skl2onnx names them after their
# node, onnx_rename_weights gives them names sorted in the order they are used.
onx = onnx_rename_weights(to_onnx(nn, X_train[:1], target_opset=15))
weights = sorted(get_train_initializer(onx))
print("weights:", weights)

curves = {"scikit-learn": [float(v) for v in nn.loss_curve_]}
trained = {}
numpy.random.seed(0)  # the seed's classes draw the first weights from numpy's generator

if runtime_problem() is None:  # the full class needs onnxruntime's training build
    full = OrtGradientOptimizer(
        add_loss_output(onx), weights, device=DEVICE, learning_rate=1e-2, max_iter=MAX_ITER
    )
    full.fit(X_train, y_train.reshape(-1, 1))
    curves["full"] = full.train_losses_
    # the full class trained the model with its loss: its weights go back into onx
    trained["full"] = full.get_trained_onnx(model=onx)

fwbw = OrtGradientForwardBackwardOptimizer(
    onx, weights, device=DEVICE, learning_rate=1e-2, max_iter=MAX_ITER
)
fwbw.fit(X_train, y_train.reshape(-1, 1))
curves["forward/backward"] = fwbw.train_losses_
trained["forward/backward"] = fwbw.get_trained_onnx()

nesterov = OrtGradientForwardBackwardOptimizer(
    onx,
    weights,
    device=DEVICE,
    learning_rate=LearningRateSGDNesterov(1e-3, nesterov=True, momentum=0.9),
    learning_penalty=ElasticLearningPenalty(l1=0, l2=1e-4),
    max_iter=MAX_ITER,
)
nesterov.fit(X_train, y_train.reshape(-1, 1))
curves["forward/backward, Nesterov + L2"] = nesterov.train_losses_
trained["forward/backward, Nesterov + L2"] = nesterov.get_trained_onnx()
print(nesterov)

# Test errors: scikit-learn's model, each ONNX copy run by onnxruntime, and the mean.
errors = {
    "predict the mean": mean_squared_error(y_test, numpy.full_like(y_test, y_train.mean())),
    "scikit-learn": mean_squared_error(y_test, nn.predict(X_test)),
}
for name, model in trained.items():
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    errors[name] = mean_squared_error(y_test, session.run(None, {"X": X_test})[0].ravel())
for name, error in errors.items():
    print(f"{name}: test mean squared error {error:.4f}")

graphs = nesterov.save_onnx_graph(os.path.join(OUT, "graphs"))
print("graphs written:", graphs)

# scikit-learn's curve is half the squared error, the seed's classes the whole of it.
fig, ax = plt.subplots(1, 1, figsize=(6, 4))
for name, curve in curves.items():
    scale = 2 if name == "scikit-learn" else 1
    ax.plot(numpy.asarray(curve) * scale, label=name)
ax.set_xlabel("epoch")
ax.set_ylabel("training loss (squared error)")
ax.set_yscale("log")
ax.set_title(f"MLPRegressor(10, 10) on {DEVICE}")
ax.legend()
figure = os.path.join(OUT, "orttraining_nn.png")
fig.savefig(figure)
plt.close(fig)
print("figure:", figure)
