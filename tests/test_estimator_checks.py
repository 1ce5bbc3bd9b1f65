"""scikit-learn's estimator checks that apply to a trainer of an ONNX model, whose input
width is fixed by the model it is given.

Each check runs on both trainers, with a linear model as wide as the data that check
fits on. The checks not run here, and why:

- checks that fit data of a width they choose per call or change it between fit and
  predict (``check_fit2d_1feature``, ``check_dict_unchanged`` and most others): the
  width is the model's, not the data's;
- sparse, complex, object, pandas and array API inputs: the trainers take dense float
  arrays, converted to float32;
- ``check_n_features_in_after_fitting``: a width other than the model's is refused in
  ortbench's words ("X has 3 features, the model expects 5"), not scikit-learn's;
- classifier, outlier and transformer checks: whether a trainer classifies follows its
  model and loss, not its class (``predict_proba`` exists on classifiers only);
- ``check_dict_unchanged``: ``predict`` builds its inference session on first use, so a
  fit does not pay for it;
- ``check_param_validation``: parameters are checked by ``fit`` with one-line
  ``OrtBenchError`` messages, not by scikit-learn's constraint tables.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from skl2onnx import to_onnx
from sklearn.linear_model import LinearRegression
from sklearn.utils import estimator_checks as checks

from ortbench.training import ForwardBackwardTrainer, FullTrainer, LearningRateSGD

#: Each check run, and the width of the data it fits on (None: it does not fit).
WIDTHS = {
    "check_parameters_default_constructible": None,
    "check_no_attributes_set_in_init": None,
    "check_get_params_invariance": None,
    "check_set_params": None,
    "check_do_not_raise_errors_in_init_or_set_params": None,
    "check_estimator_cloneable": None,
    "check_estimator_repr": None,
    "check_estimators_unfitted": 2,
    "check_estimators_fit_returns_self": 2,
    "check_fit_check_is_fitted": 2,
    "check_dont_overwrite_parameters": 3,
    "check_estimators_overwrite_params": 2,
    "check_fit_score_takes_y": 3,
    "check_sample_weights_list": 3,
    "check_sample_weights_shape": 2,
    "check_sample_weights_not_overwritten": 2,
    "check_estimators_nan_inf": 3,
    "check_readonly_memmap_input": 2,
    "check_pipeline_consistency": 3,
    "check_estimators_pickle": 3,
    "check_fit_idempotent": 2,
    "check_methods_subset_invariance": 3,
    "check_methods_sample_order_invariance": 3,
    "check_estimators_dtypes": 5,
    "check_n_features_in": 2,
}


def linear_onnx(width: int):
    """A linear regression over ``width`` features, as skl2onnx converts it."""
    X = np.random.default_rng(0).random((10, width), dtype=np.float32)
    return to_onnx(LinearRegression().fit(X, X[:, 0]), X[:1])


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
@pytest.mark.parametrize("check", list(WIDTHS))
def test_scikit_learn_check(trainer, check):
    # the checks' data reach 100 in magnitude: a small rate keeps two epochs finite
    estimator = trainer(
        linear_onnx(WIDTHS[check] or 2),
        learning_rate=LearningRateSGD(1e-6),
        batch_size=4,
        max_iter=2,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checks warn about what they skip
        getattr(checks, check)(trainer.__name__, estimator)
