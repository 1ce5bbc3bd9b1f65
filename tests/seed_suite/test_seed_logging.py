"""``enable_logging=True``: one record per epoch, named as the seed named its epochs."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

from ortbench.training.seed import OrtGradientForwardBackwardOptimizer


@pytest.mark.parametrize("weighted", [False, True])
def test_each_epoch_logs_its_loss_under_the_seeds_method_name(seed_linear, caplog, weighted):
    onx, X, y = seed_linear
    w = np.linspace(1, 2, len(X)).astype(np.float32) if weighted else None
    model = OrtGradientForwardBackwardOptimizer(
        onx, ["coef", "intercept"], enable_logging=True, max_iter=4
    )
    with caplog.at_level(logging.DEBUG, logger="ortbench.seed"):
        assert model.fit(X, y, w) is model
    lines = [r.getMessage() for r in caplog.records if r.name == "ortbench.seed"]
    pattern = re.compile(
        r"\[OrtGradientForwardBackwardOptimizer\._iteration\] epoch (\d+)/4 loss=(\S+) lr=(\S+)"
    )
    parsed = [pattern.fullmatch(line) for line in lines]
    assert all(parsed) and [int(m[1]) for m in parsed] == [1, 2, 3, 4]
    np.testing.assert_allclose([float(m[2]) for m in parsed], model.train_losses_, rtol=1e-5)
    # the rate logged is the seed's schedule, updated after each epoch with t the index
    # of the epoch just finished: eta0 / (t + 1) ** 0.25
    rates = [float(m[3]) for m in parsed]
    np.testing.assert_allclose(rates, [0.01, 0.01, 0.01 / 2**0.25, 0.01 / 3**0.25], rtol=1e-5)
