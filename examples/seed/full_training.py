"""The seed page "Full Training with OrtGradientOptimizer", run on ortbench.

Its code blocks, in order, after the data and the model they assume: the page's first
example trains a linear regression, so the data is ``make_regression`` with sample
weights and the model a scikit-learn ``LinearRegression`` written as MatMul + Add over
initializers ``coef`` and ``intercept`` (the seed converted it with mlprodict, which
ortbench does not use). Imports point to ortbench. ``SEED_MAX_ITER`` (environment)
shortens the training for CI.
"""

import os

import numpy
from seed_models import linear_onnx
from sklearn.datasets import make_regression
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import train_test_split

from ortbench.training.seed import OrtGradientOptimizer, add_loss_output

MAX_ITER = int(os.environ.get("SEED_MAX_ITER", 100))


X, y = make_regression(n_samples=1000, n_features=2, bias=2, random_state=0)
X, y = X.astype(numpy.float32), y.astype(numpy.float32)
w = (numpy.random.rand(y.shape[0]) + 1).astype(numpy.float32)
X_train, X_test, y_train, y_test, w_train, w_test = train_test_split(X, y, w, random_state=0)
lr = LinearRegression().fit(X_train, y_train, sample_weight=w_train)
onx = linear_onnx(lr)

# The page's code blocks.

onx_loss = add_loss_output(
    onx,
    weight_name="weight",
    score_name="elastic",
    l1_weight=0.1,
    l2_weight=0.9,
    penalty={"coef": {"l2": 0.01}},
)

train_session = OrtGradientOptimizer(
    onx_loss, ["intercept", "coef"], learning_rate=1e-3, max_iter=MAX_ITER
)

train_session.fit(X_train, y_train, w_train)

state_tensors = train_session.get_state()

losses = train_session.train_losses_

print(train_session)
print("scikit-learn", lr.coef_, lr.intercept_)
print("onnxruntime ", state_tensors["coef"].ravel(), state_tensors["intercept"])
print("losses", losses[:3], "...", losses[-3:])
