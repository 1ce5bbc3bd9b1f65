"""A small linear regression and its ONNX graph, as the seed's tests train them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper


@pytest.fixture
def seed_linear():
    """(model, X, y): ``variable = X @ coef + intercept``, coef (3, 1), intercept (1,)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3)).astype(np.float32)
    y = (X @ np.array([[0.5], [-1.0], [0.25]]) + 0.3).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "coef"], ["mul"]),
            helper.make_node("Add", ["mul", "intercept"], ["variable"]),
        ],
        "linear",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [None, 1])],
        [
            numpy_helper.from_array(np.zeros((3, 1), np.float32), "coef"),
            numpy_helper.from_array(np.zeros((1,), np.float32), "intercept"),
        ],
    )
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    onx.ir_version = 8
    return onx, X, y
