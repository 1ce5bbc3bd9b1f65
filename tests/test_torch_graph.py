"""The torch runner of ONNX graphs against onnxruntime (forward) and torch (gradients)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

torch = pytest.importorskip("torch")
from torch_modules import NETWORKS, export, network  # noqa: E402

from ortbench.torch_graph import TorchGraph, unsupported  # noqa: E402


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_the_runner_computes_and_differentiates_the_exported_network(name, opset):
    module, features = network(name), NETWORKS[name][1]
    model = export(module, features, opset)
    x = torch.randn(5, features, generator=torch.Generator().manual_seed(1))
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    expected = session.run(None, {"X": x.numpy()})[0]
    parameters = dict(module.named_parameters())
    trained = [i.name for i in model.graph.initializer if i.name in parameters]
    assert len(trained) >= len(parameters) // 2, "the export renamed most parameters"
    runner = TorchGraph(model, ["Y"], trained)
    ours = x.clone().requires_grad_(True)
    output = runner(ours)[0]
    np.testing.assert_allclose(output.detach().numpy(), expected, rtol=1e-4, atol=1e-5)

    cotangent = torch.randn(output.shape, generator=torch.Generator().manual_seed(2))
    (output * cotangent).sum().backward()
    theirs = x.clone().requires_grad_(True)
    (module(theirs) * cotangent).sum().backward()
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=1e-5)
    for weight in trained:
        torch.testing.assert_close(
            runner.parameter(weight).grad, parameters[weight].grad, rtol=1e-4, atol=1e-5,
            msg=lambda m, w=weight: f"{w}: {m}",
        )  # fmt: skip


def test_an_operator_the_runner_lacks_is_named_with_its_node():
    model = export(network("normalized"), 6)
    node = next(n for n in model.graph.node if n.op_type == "Erf")
    node.op_type = "Erfc"
    assert unsupported(model, ["Y"]) == f"torch runs no ONNX operator Erfc (node {node.name!r})"
