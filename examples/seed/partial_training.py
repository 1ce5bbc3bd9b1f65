"""The seed page "Partial Training with OrtGradientForwardBackwardOptimizer", on ortbench.

Its code blocks, in order, after the data and the model they assume (a linear regression
with initializers ``coef`` and ``intercept``, as in ``full_training.py``). Imports point
to ortbench, and the comma missing after ``learning_rate=LearningRateSGDNesterov()`` on
the page is added. ``SEED_MAX_ITER`` (environment) shortens the training for CI.
"""

import os

import numpy
from seed_models import linear_onnx
from sklearn.datasets import make_regression
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import train_test_split

from ortbench.training import (
    ElasticLearningLoss,
    ElasticLearningPenalty,
    LearningRateSGDNesterov,
)
from ortbench.training.seed import OrtGradientForwardBackwardOptimizer

MAX_ITER = int(os.environ.get("SEED_MAX_ITER", 100))

X, y = make_regression(n_samples=1000, n_features=2, bias=2, random_state=0)
X, y = X.astype(numpy.float32), y.astype(numpy.float32)
w = (numpy.random.rand(y.shape[0]) + 1).astype(numpy.float32)
X_train, X_test, y_train, y_test, w_train, w_test = train_test_split(X, y, w, random_state=0)
lr = LinearRegression().fit(X_train, y_train, sample_weight=w_train)
onx = linear_onnx(lr)

# The page's code blocks.

train_session = OrtGradientForwardBackwardOptimizer(
    onx,
    ["coef", "intercept"],
    learning_rate=LearningRateSGDNesterov(),
    learning_loss=ElasticLearningLoss(l1_weight=0.1, l2_weight=0.9),
    learning_penalty=ElasticLearningPenalty(l1=0.1, l2=0.9),
    max_iter=MAX_ITER,
)

train_session.fit(X_train, y_train, w_train)

state_tensors = train_session.get_state()

losses = train_session.train_losses_

print(train_session)
print("losses", losses[:3], "...", losses[-3:])
