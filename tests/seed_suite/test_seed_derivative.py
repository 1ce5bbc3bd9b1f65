"""``onnx_derivative(options=DerivativeOptions.Loss, label=..., loss=..., path_name=...)``:
the seed's call, which asked onnxruntime-training's builder for the gradient of the
outputs ``label`` names with respect to the inputs, and saved it (checked against central
finite differences of the model's own session)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest

from ortbench.training import OrtBenchError
from ortbench.training.seed import DerivativeOptions, onnx_derivative


def run(onx, **feeds):
    sess = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


@pytest.mark.parametrize(
    "backend", ["portable", pytest.param("ort-training", marks=pytest.mark.training_build)]
)
def test_the_loss_option_differentiates_the_labelled_output_and_saves_it(
    backend, tmp_path, regression, mlp_onnx
):
    X = regression[0][:6]
    path = tmp_path / "grad.onnx"
    grad = onnx_derivative(
        mlp_onnx,
        options=DerivativeOptions.Loss,
        label="variable",
        loss="loss",
        path_name=str(path),
        backend=backend,
    )
    assert onnx.load(path) == grad
    assert [i.name for i in grad.graph.input] == ["X"]
    out = run(grad, X=X)
    assert sorted(out) == ["X_grad", "variable"]
    np.testing.assert_allclose(out["variable"], run(mlp_onnx, X=X)["variable"], rtol=1e-5)

    def total(x: np.ndarray) -> float:
        return float(run(mlp_onnx, X=x.astype(np.float32))["variable"].astype(np.float64).sum())

    h, numeric = 1e-2, np.zeros(X.shape)
    for index in np.ndindex(*X.shape):
        up, down = X.astype(np.float64), X.astype(np.float64)
        up[index] += h
        down[index] -= h
        numeric[index] = (total(up) - total(down)) / (2 * h)
    np.testing.assert_allclose(out["X_grad"], numeric, rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (dict(label="variable", loss="loss"), "give path_name"),
        (dict(loss="loss", path_name="g.onnx"), "needs label"),
        (dict(label="variable", path_name="g.onnx"), "needs loss, a name"),
        (dict(label="nothing", loss="loss", path_name="g.onnx"), "'nothing' is not a float output"),
        (dict(label="variable", loss="loss", path_name="g.onnx", weights=[]), "weights=None"),
        (
            dict(label="variable", loss="loss", path_name="no/such/folder/g.onnx"),
            "cannot write the gradient graph to .*g.onnx: No such file or directory",
        ),
    ],
)
def test_the_loss_option_refuses_what_the_seed_refused(arguments, message, mlp_onnx, tmp_path):
    if "path_name" in arguments:
        arguments["path_name"] = str(tmp_path / arguments["path_name"])
    with pytest.raises(OrtBenchError, match=message):
        onnx_derivative(mlp_onnx, options=DerivativeOptions.Loss, **arguments)
    with pytest.raises(OrtBenchError, match=r"go with options=DerivativeOptions\.Loss"):
        onnx_derivative(mlp_onnx, label="variable")
