"""Models exported with a fixed batch dimension train at any batch size."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnxruntime
import pytest
from helpers import fitted_mlp
from onnx import TensorProto, helper, numpy_helper
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType

from ortbench.training import ForwardBackwardTrainer, FullTrainer, OrtBenchError
from ortbench.training.graphs.batch_axis import free_batch_axis

TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("backend", ["ort-training", "portable"])
@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_a_fixed_batch_model_trains_as_its_dynamic_twin(regression, trainer, backend):
    X, y = regression
    mlp = fitted_mlp(X, y)
    fixed = to_onnx(mlp, initial_types=[("X", FloatTensorType([16, X.shape[1]]))])
    dynamic = to_onnx(mlp, initial_types=[("X", FloatTensorType([None, X.shape[1]]))])
    found = []
    for model in (fixed, dynamic):
        fitted = trainer(model, batch_size=7, max_iter=2, shuffle=False, backend=backend).fit(
            X[:100], y[:100], X_val=X[100:], y_val=y[100:]
        )  # 7 rows a batch, 2 in the last one, 20 validation rows: none is 16
        found.append((fitted.train_losses_, fitted.validation_losses_, fitted.predict(X[:33])))
    for ours, theirs in zip(*found):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.skipif(not TORCH, reason="torch is not installed")
@pytest.mark.parametrize("name", ["images", "signal", "normalized", "shapes", "attention"])
def test_a_torch_export_without_dynamic_axes_runs_any_batch(name):
    import torch
    from torch_modules import NETWORKS, export, network

    module, features = network(name), NETWORKS[name][1]
    model = free_batch_axis(export(module, features, batch=16), "X")
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    for rows in (5, 16, 37):
        x = torch.randn(rows, features, generator=torch.Generator().manual_seed(rows))
        with torch.no_grad():
            expected = module(x).numpy()
        found = session.run(None, {"X": x.numpy()})[0]
        np.testing.assert_allclose(found, expected, rtol=1e-4, atol=1e-5)


def _reshapes(allowzero: int, shapes: dict[str, list[int]]):
    """X (16, 12) through one Reshape per named constant shape, in order."""
    names = ["X", *shapes]
    nodes = [
        helper.make_node("Reshape", [x, n], [n + "_out"], name=n, allowzero=allowzero)
        for x, n in zip([names[0], *[m + "_out" for m in shapes]], shapes)
    ]
    graph = helper.make_graph(
        nodes,
        "reshapes",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [16, 12])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in shapes.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _shapes_read(model) -> list[list[int]]:
    values = {i.name: numpy_helper.to_array(i).tolist() for i in model.graph.initializer}
    return [values[n.input[1]] for n in model.graph.node]


@pytest.mark.parametrize("allowzero", [0, 1])
def test_a_reshape_with_allowzero_is_freed_where_no_zero_is_written(allowzero):
    """torch's default exporter writes every Reshape with ``allowzero=1``, where a 0 in the
    shape is a zero, not "copy the input's": ``[16, 4, 3]`` still becomes ``[-1, 4, 3]``
    (it was left fixed: the model refused), ``[16, -1]`` cannot become ``[0, -1]``."""
    freed = free_batch_axis(_reshapes(allowzero, {"cube": [16, 4, 3]}), "X")
    assert _shapes_read(freed) == [[-1, 4, 3]]
    session = onnxruntime.InferenceSession(
        freed.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    x = np.arange(5 * 12, dtype=np.float32).reshape(5, 12)
    np.testing.assert_array_equal(session.run(None, {"X": x})[0], x.reshape(5, 4, 3))
    flat = _reshapes(allowzero, {"cube": [16, 4, 3], "flat": [16, -1]})
    second = [16, -1] if allowzero else [0, -1]  # left as it is: a 0 would be a zero
    assert _shapes_read(free_batch_axis(flat, "X")) == [[-1, 4, 3], second]


def test_the_node_that_pins_the_batch_is_named():
    """A constant as tall as the exported batch, added to the rows: no rewrite frees it."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["X", "offsets"], ["h"], name="per_row_offsets"),
            helper.make_node("MatMul", ["h", "W"], ["Y"], name="layer"),
        ],
        "pinned",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [16, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [16, 1])],
        [
            numpy_helper.from_array(np.ones((16, 3), np.float32), "offsets"),
            numpy_helper.from_array(np.ones((3, 1), np.float32), "W"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    X, y = np.ones((20, 3), np.float32), np.ones(20, np.float32)
    with pytest.raises(
        OrtBenchError, match=r"^Add node 'per_row_offsets' fixes the batch at the 16 rows"
    ):
        ForwardBackwardTrainer(model, weights_to_train=["W"], backend="portable").fit(X, y)
