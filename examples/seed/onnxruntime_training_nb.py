"""The seed tutorial "Stochastic Gradient Descent on simple function", run on ortbench.

The code blocks are the tutorial's, in its order, with these changes:

- imports point to ortbench; ``onnx.printer.to_text`` prints graphs where the tutorial
  used mlprodict's text plots, and an onnxruntime ``InferenceSession`` runs them where it
  used mlprodict's ``OnnxInference`` (``run`` returns a list, zipped with the names);
- ``fct`` was written with mlprodict's numpy-to-ONNX decorator, which ortbench does not
  have: the same graph (same nodes, same names) is written with onnx's ``make_node`` and
  ``make_graph``, and ``fct`` runs it;
- ``onnx_rename_names`` (mlprodict) only renamed intermediate results: left out;
- the notebook's magics (``%onnxview``, ``%timeit``), plots and the profiling section
  (pyquickhelper) are left out; the loss curves stay as DataFrames;
- ``save_onnx_graph`` writes ortbench's graphs (their names differ from the seed's) into
  ``mlp_onnx_ort`` under ``SEED_OUT`` (environment; a new temporary folder otherwise), not
  into the current folder.

``SEED_MAX_ITER`` (environment) shortens the trainings for CI.
"""

import os
import pprint
import tempfile
import warnings

import numpy
import pandas
from onnx.printer import to_text as onnx_simple_text_plot
from onnxruntime import InferenceSession
from seed_models import fct_onnx
from skl2onnx import to_onnx
from sklearn.datasets import make_regression
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPRegressor

from ortbench.training import DerivativeOptions, LearningRateSGDNesterov, onnx_derivative
from ortbench.training.graphs.outputs import select_outputs
from ortbench.training.graphs.weights import onnx_rename_weights
from ortbench.training.seed import (
    OrtGradientForwardBackwardOptimizer,
    OrtGradientOptimizer,
    add_loss_output,
)

MAX_ITER = int(os.environ.get("SEED_MAX_ITER", 100))


_fct_session = InferenceSession(fct_onnx().SerializeToString(), providers=["CPUExecutionProvider"])


def fct(x):
    return _fct_session.run(None, {"x": x})[0]


# A simple problem

x = numpy.array([[0, 0], [1, 0], [0, 1], [1, 1], [2, 2]], dtype=numpy.float32)
print(fct(x))

# Gradient : retropropagation

onx = fct_onnx()
grad = onnx_derivative(onx)
print(onnx_simple_text_plot(grad))
print(set(n.op_type for n in grad.graph.node))

# Add a square loss

onx_loss = add_loss_output(onx)
print(onnx_simple_text_plot(onx_loss))

onx_loss_only = select_outputs(onx_loss, ["loss"])
print(onnx_simple_text_plot(onx_loss_only))

# Gradient again : loss + retropropagation

grad_loss = onnx_derivative(
    onx_loss_only, options=DerivativeOptions.FillGrad | DerivativeOptions.KeepOutputs
)
print(onnx_simple_text_plot(grad_loss))

y = fct(x)
oinf = InferenceSession(grad_loss.SerializeToString(), providers=["CPUExecutionProvider"])

init = numpy.array([[2, 3]], dtype=numpy.float32)
init_1 = numpy.array([[0.5, 0.33333]], dtype=numpy.float32)
init_b10 = numpy.array([1], dtype=numpy.float32)
result = oinf.run(None, {"x": x, "label": y, "init": init, "init_1": init_1, "init_b10": init_b10})
result = dict(zip([o.name for o in oinf.get_outputs()], result))
pprint.pprint(result)

# TrainingSession

X = numpy.random.randn(100, 2).astype(numpy.float32) / 10
y = fct(X) + (numpy.random.randn(100, 1) / 1000).astype(numpy.float32)
print(X.shape, y.shape)

train_session = OrtGradientOptimizer(
    onx_loss, ["init", "init_1", "init_b10"], learning_rate=1e-1, batch_size=5, max_iter=MAX_ITER
)

print(train_session.fit(X, y))
print(train_session.trained_coef_)
print(train_session.train_losses_[-5:])
full_losses = pandas.DataFrame({"loss": train_session.train_losses_})

# Forward backward: TrainingAgent

train_session = OrtGradientForwardBackwardOptimizer(
    onx, ["init", "init_1", "init_b10"], learning_rate=1e-1, batch_size=2, max_iter=MAX_ITER
)
print(train_session.fit(X, y))
print(train_session.train_losses_[-5:])
fwbw_losses = pandas.DataFrame({"loss": train_session.train_losses_})
print(train_session.trained_coef_)
print({k: v.numpy() for k, v in train_session.trained_coef_.items()})

trained_onx = train_session.get_trained_onnx()
print(onnx_simple_text_plot(trained_onx))

oinf = InferenceSession(trained_onx.SerializeToString(), providers=["CPUExecutionProvider"])
print(oinf.run(None, {"x": X})[0][:5])
print(y[:5])

# MLPregressor

X, y = make_regression(1000, n_features=100, bias=2)
X = X.astype(numpy.float32)
y = y.astype(numpy.float32)
X_train, X_test, y_train, y_test = train_test_split(X, y)
batch_size = 15
max_iter = MAX_ITER

nn = MLPRegressor(
    hidden_layer_sizes=(50, 10),
    max_iter=max_iter,
    solver="sgd",
    learning_rate_init=5e-5,
    n_iter_no_change=max_iter * 3,
    batch_size=batch_size,
    learning_rate="invscaling",
    # default values
    momentum=0.9,
    nesterovs_momentum=True,
    power_t=0.5,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    nn.fit(X_train, y_train)

# Conversion to ONNX

onx = to_onnx(nn, X_train[:1].astype(numpy.float32), target_opset=15)
onx = onnx_rename_weights(onx)
train_session = OrtGradientForwardBackwardOptimizer(
    onx,
    device="cpu",
    learning_rate=5e-5,
    warm_start=False,
    max_iter=max_iter,
    batch_size=batch_size,
)
print(train_session.fit(X_train, y_train))

mlp_losses = pandas.DataFrame(dict(skl_loss=nn.loss_curve_, ort_loss=train_session.train_losses_))

# Not exactly the same: Nesterov?

train_session2 = OrtGradientForwardBackwardOptimizer(
    onx,
    device="cpu",
    warm_start=False,
    max_iter=max_iter,
    batch_size=batch_size,
    learning_rate=LearningRateSGDNesterov(1e-5, nesterov=True, momentum=0.9),
)
print(train_session2.fit(X_train, y_train))

mlp_losses = pandas.DataFrame(
    dict(
        skl_loss=nn.loss_curve_,
        ort_loss=train_session.train_losses_,
        ort_loss2=train_session2.train_losses_,
    )
)

graphs = os.path.join(os.environ.get("SEED_OUT") or tempfile.mkdtemp(), "mlp_onnx_ort")
if not os.path.exists(graphs):
    os.mkdir(graphs)
print(train_session2.save_onnx_graph(graphs))
