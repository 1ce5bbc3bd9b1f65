"""The seed's helpers: its batch iterator, its type and device look-ups."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from ortbench.training import OrtBenchError
from ortbench.training.runtime import capi
from ortbench.training.seed import (
    OrtDataLoader,
    device_to_providers,
    dtype_to_var_type,
    get_onnx_opset,
    get_train_initializer,
    proto_type_to_dtype,
)


@pytest.mark.parametrize("n_rows", [100, 101, 11])
@pytest.mark.parametrize("weighted", [False, True])
def test_every_batch_has_batch_size_rows_and_an_epoch_covers_every_row(n_rows, weighted):
    rng = np.random.default_rng(n_rows)
    X = rng.normal(size=(n_rows, 4))
    y = np.arange(n_rows, dtype=np.float64)
    w = rng.uniform(1, 2, size=n_rows) if weighted else None
    data = OrtDataLoader(X, y, w, batch_size=15, random_state=0)
    expected = [((n_rows, 4), np.float64), ((n_rows, 1), np.float64)]
    assert data.desc == expected + ([((n_rows,), np.float64)] if weighted else [])
    assert repr(data).startswith("OrtDataLoader(...")
    size = min(15, n_rows)
    seen = []
    for batch in data.iter_ortvalue():
        assert all(isinstance(v, capi.OrtValue) for v in batch)
        assert len(batch) == (3 if weighted else 2)
        xb, yb = batch[0].numpy(), batch[1].numpy()
        assert xb.shape == (size, 4) and yb.shape == (size, 1)
        # rows stay together: X, y and w of one batch come from the same samples
        rows = yb.ravel().astype(int)
        np.testing.assert_array_equal(xb, X[rows])
        if weighted:
            np.testing.assert_array_equal(batch[2].numpy(), w[rows])
        seen.extend(rows)
    assert len(seen) == -(-n_rows // size) * size
    assert set(seen) == set(range(n_rows))


def test_in_order_iteration_gives_the_same_batches_both_ways_and_survives_pickle():
    X = np.arange(40, dtype=np.float64).reshape(20, 2)
    y = np.arange(20, dtype=np.float64)
    data = pickle.loads(pickle.dumps(OrtDataLoader(X, y, batch_size=5, random_iter=False)))
    as_numpy = list(data.iter_numpy())
    as_ort = list(data.iter_ortvalue())
    assert len(as_numpy) == len(as_ort) == 4
    for k, (n, o) in enumerate(zip(as_numpy, as_ort)):
        np.testing.assert_array_equal(n[0], X[5 * k : 5 * k + 5])
        np.testing.assert_array_equal(o[0].numpy(), n[0])
        np.testing.assert_array_equal(o[1].numpy().ravel(), y[5 * k : 5 * k + 5])


def test_a_bad_device_or_mismatched_rows_are_one_line():
    X = np.zeros((6, 2))
    with pytest.raises(OrtBenchError, match="device must be"):
        OrtDataLoader(X, np.zeros(6), device="cpu2")
    with pytest.raises(OrtBenchError, match="as many rows"):
        OrtDataLoader(X, np.zeros(5))


def test_type_and_opset_lookups():
    from skl2onnx.common.data_types import DoubleTensorType, FloatTensorType

    assert proto_type_to_dtype(TensorProto.FLOAT) is np.float32
    assert proto_type_to_dtype(TensorProto.DOUBLE) is np.float64
    assert proto_type_to_dtype("tensor(double)") is np.float64
    with pytest.raises(ValueError):
        proto_type_to_dtype(TensorProto.BOOL)
    assert dtype_to_var_type(np.float32) is FloatTensorType
    assert dtype_to_var_type(np.float64) is DoubleTensorType
    with pytest.raises(ValueError):
        dtype_to_var_type(np.int8)
    assert device_to_providers("cpu") == ["CPUExecutionProvider"]
    name, options = device_to_providers("cuda:1")[0]
    assert (name, options["device_id"]) == ("CUDAExecutionProvider", 1)


def test_train_initializers_and_opset(seed_linear):
    onx, _, _ = seed_linear
    inits = get_train_initializer(onx)
    assert set(inits) == {"coef", "intercept"}
    value, initializer = inits["coef"]
    assert value.shape == (3, 1) and initializer.name == "coef"
    np.testing.assert_array_equal(value, numpy_helper.to_array(initializer))
    assert get_onnx_opset(onx) == 15
    with pytest.raises(ValueError):
        get_onnx_opset(onx, "ai.onnx.ml")
