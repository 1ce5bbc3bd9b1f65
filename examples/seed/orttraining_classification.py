"""A binary ``MLPClassifier`` trained by the seed's forward/backward class on its log
loss, as the seed's classification benchmark does, on the CPU.

skl2onnx converts the classifier (no ZipMap); the raw score feeding its Sigmoid is
selected as the output, and ``NegLogLearningLoss`` (the seed's: sigmoid of that score,
labels 0 or 1 in a column) trains it from random weights with Nesterov momentum and an
L2 penalty. The accuracy of the trained score is compared with scikit-learn's and with
predicting the majority class. The loss curve (matplotlib's Agg backend) is written into
``SEED_OUT`` (environment; a new temporary folder otherwise); ``SEED_MAX_ITER``
(environment) shortens the training for CI.
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
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

from ortbench.training import ElasticLearningPenalty
from ortbench.training.graphs.outputs import select_outputs
from ortbench.training.graphs.weights import onnx_rename_weights
from ortbench.training.seed import (
    LearningRateSGDNesterov,
    NegLogLearningLoss,
    OrtGradientForwardBackwardOptimizer,
    get_train_initializer,
)

MAX_ITER = int(os.environ.get("SEED_MAX_ITER", 30))
OUT = os.environ.get("SEED_OUT") or tempfile.mkdtemp(prefix="seed-classification-")

X, y = make_classification(
    n_samples=600, n_features=10, n_informative=5, n_classes=2, random_state=0
)
X = X.astype(numpy.float32)
X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)

nn = MLPClassifier(
    hidden_layer_sizes=(10,),
    solver="sgd",
    learning_rate_init=1e-2,
    batch_size=10,
    max_iter=MAX_ITER,
    n_iter_no_change=MAX_ITER * 3,
    random_state=0,
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # stopped before convergence, on purpose
    nn.fit(X_train, y_train)

onx = to_onnx(nn, X_train[:1], target_opset=15, options={"zipmap": False})
# The binary classifier's last Sigmoid turns one raw score into the probability of class
# 1: that score is what the log loss trains.
sigmoid = next(node for node in onx.graph.node if node.op_type == "Sigmoid")
score = onnx_rename_weights(select_outputs(onx, [sigmoid.input[0]]))
weights = sorted(get_train_initializer(score))

numpy.random.seed(0)  # the first weights are drawn from numpy's generator
trainer = OrtGradientForwardBackwardOptimizer(
    score,
    weights,
    device="cpu",
    learning_loss=NegLogLearningLoss(),
    learning_rate=LearningRateSGDNesterov(1e-2, nesterov=True, momentum=0.9),
    learning_penalty=ElasticLearningPenalty(l1=0, l2=1e-4),
    max_iter=MAX_ITER,
    batch_size=10,
)
trainer.fit(X_train, y_train.reshape(-1, 1).astype(numpy.float32))
print(trainer)

session = onnxruntime.InferenceSession(
    trainer.get_trained_onnx().SerializeToString(), providers=["CPUExecutionProvider"]
)
raw = session.run(None, {"X": X_test})[0].ravel()
accuracy = {
    "majority class": max(y_test.mean(), 1 - y_test.mean()),
    "scikit-learn": nn.score(X_test, y_test),
    "forward/backward, log loss": float(((raw > 0).astype(int) == y_test).mean()),
}
for name, value in accuracy.items():
    print(f"{name}: test accuracy {value:.3f}")

fig, ax = plt.subplots(1, 1, figsize=(5, 3))
ax.plot(nn.loss_curve_, label="scikit-learn")
ax.plot(trainer.train_losses_, label="forward/backward")
ax.set_xlabel("epoch")
ax.set_ylabel("training log loss")
ax.legend()
figure = os.path.join(OUT, "orttraining_classification.png")
fig.savefig(figure)
plt.close(fig)
print("figure:", figure)
