"""Training with whatever onnx is installed, also one that writes a newer IR version than
onnxruntime-training 1.19.2 reads (CI runs this file once more with the newest onnx)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import ortbench_names, sklearn_epoch
from onnx import TensorProto, helper

from ortbench.training import ForwardBackwardTrainer, FullTrainer, LearningRateSGD
from ortbench.training.errors import OrtBenchError
from ortbench.training.graphs.loading import fit_runtime
from ortbench.training.runtime.build import max_ir_version


@pytest.mark.training_build
@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer], ids=["full", "fwbw"])
def test_ort_training_follows_scikit_learn_with_the_installed_onnx(trainer, regression, tmp_path):
    X, y = regression
    onx, start, end = sklearn_epoch(X, y, 0.0)
    onx.ir_version = onnx.IR_VERSION  # what the installed onnx's make_model writes
    model = trainer(
        onx,
        learning_rate=LearningRateSGD(0.01, learning_rate="constant"),
        backend="ort-training",
        batch_size=16,
        max_iter=1,
        shuffle=False,
    )
    state = model.fit(X, y).get_state()
    for name, w0, w1 in zip(ortbench_names(len(start) // 2), start, end):
        expected = w1 - w0
        got = state[name] - w0.reshape(state[name].shape)
        np.testing.assert_allclose(
            got.ravel(), expected.ravel(), rtol=1e-5, atol=1e-5 * np.abs(expected).max()
        )
    for name, path in model.save_onnx_graph(tmp_path).items():
        assert onnx.load(path).ir_version <= max_ir_version(), name


@pytest.mark.skipif(
    max_ir_version() >= onnx.IR_VERSION, reason="the installed onnx writes no newer IR version"
)
def test_a_type_of_a_newer_ir_version_is_refused_in_one_line():
    newest = max(TensorProto.DataType.values())
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "newer_type",
        [helper.make_tensor_value_info("X", newest, [1])],
        [helper.make_tensor_value_info("Y", newest, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(OrtBenchError, match=r"^the model \(IR version \d+\) uses tensors of type"):
        fit_runtime(model)
