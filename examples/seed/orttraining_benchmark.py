"""scikit-learn against the seed's classes over a few batch sizes, as the seed's benchmark
pages compare them, on the CPU and with small data.

For each batch size, a ``MLPRegressor`` trains with scikit-learn's SGD, then its ONNX
copy (skl2onnx) trains with the full class (``OrtGradientOptimizer``, on the training
build only) and the forward/backward class (``OrtGradientForwardBackwardOptimizer``),
the same number of epochs. The table holds the seconds per epoch and the last training
loss of each; the figure (matplotlib's Agg backend) is written into ``SEED_OUT``
(environment; a new temporary folder otherwise). ``SEED_MAX_ITER`` (environment) sets
the epochs. The figures printed are one run on whatever machine runs it: compare ratios.
"""

import os
import tempfile
import time
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy
import pandas
from skl2onnx import to_onnx
from sklearn.datasets import make_regression
from sklearn.neural_network import MLPRegressor

from ortbench.training.graphs.weights import onnx_rename_weights
from ortbench.training.runtime.build import runtime_problem
from ortbench.training.seed import (
    OrtGradientForwardBackwardOptimizer,
    OrtGradientOptimizer,
    add_loss_output,
    get_train_initializer,
)

MAX_ITER = int(os.environ.get("SEED_MAX_ITER", 10))
OUT = os.environ.get("SEED_OUT") or tempfile.mkdtemp(prefix="seed-benchmark-")
BATCH_SIZES = (10, 50, 200)

X, y = make_regression(n_samples=400, n_features=20, noise=5.0, bias=2, random_state=0)
X, y = X.astype(numpy.float32), (y / 100).astype(numpy.float32)


def timed_fit(model, *args):
    """The seconds one epoch of ``model.fit(*args)`` took, on average."""
    begin = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn stops before convergence
        model.fit(*args)
    return (time.perf_counter() - begin) / MAX_ITER


rows = []
for batch_size in BATCH_SIZES:
    nn = MLPRegressor(
        hidden_layer_sizes=(20, 10),
        solver="sgd",
        learning_rate_init=1e-3,
        batch_size=batch_size,
        max_iter=MAX_ITER,
        n_iter_no_change=MAX_ITER * 3,
        random_state=0,
    )
    seconds = timed_fit(nn, X, y)
    # scikit-learn's loss is half the squared error; the seed's classes use the whole
    rows.append(("scikit-learn", batch_size, seconds, 2 * nn.loss_curve_[-1]))

    onx = onnx_rename_weights(to_onnx(nn, X[:1], target_opset=15))
    weights = sorted(get_train_initializer(onx))
    trainers = {
        "forward/backward": OrtGradientForwardBackwardOptimizer(
            onx, weights, device="cpu", learning_rate=1e-3, max_iter=MAX_ITER, batch_size=batch_size
        )
    }
    if runtime_problem() is None:  # the full class needs onnxruntime's training build
        trainers["full"] = OrtGradientOptimizer(
            add_loss_output(onx),
            weights,
            device="cpu",
            learning_rate=1e-3,
            max_iter=MAX_ITER,
            batch_size=batch_size,
        )
    for name, trainer in trainers.items():
        numpy.random.seed(0)  # the first weights are drawn from numpy's generator
        seconds = timed_fit(trainer, X, y.reshape(-1, 1))
        rows.append((name, batch_size, seconds, trainer.train_losses_[-1]))

table = pandas.DataFrame(rows, columns=["trainer", "batch_size", "s/epoch", "last loss"])
print(table.to_string(index=False))

fig, ax = plt.subplots(1, 1, figsize=(5, 3))
for name, group in table.groupby("trainer"):
    ax.plot(group["batch_size"], group["s/epoch"], "o-", label=name)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("batch size")
ax.set_ylabel("seconds per epoch")
ax.set_title(f"MLPRegressor(20, 10), {len(X)} rows")
ax.legend()
figure = os.path.join(OUT, "orttraining_benchmark.png")
fig.savefig(figure)
plt.close(fig)
print("figure:", figure)
