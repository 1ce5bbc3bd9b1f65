"""The torch runner of ONNX graphs against onnxruntime (forward) and torch (gradients)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")
from torch_modules import NETWORKS, export, exported_case, network  # noqa: E402

from ortbench.torch_graph import TorchGraph, unsupported  # noqa: E402


@pytest.mark.parametrize("opset", [17, 18, 20])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_the_runner_computes_and_differentiates_the_exported_network(name, opset):
    case = exported_case(name, opset)
    module, model, x, expected = case.module, case.model, case.x, case.expected
    parameters, trained = case.parameters, case.trained
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


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_with_ceil_mode_agrees_with_onnxruntime_or_is_refused(count_include_pad):
    """With ceil_mode, a window overhangs the input: ONNX divides it by the whole kernel
    when pads count, torch by the part inside; without counting pads they agree."""
    from ortbench.training import OrtBenchError

    node = helper.make_node(
        "AveragePool", ["X"], ["Y"], name="pool", kernel_shape=[2, 2], strides=[2, 2],
        ceil_mode=1, count_include_pad=count_include_pad,
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 1, 5, 7])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = np.arange(70, dtype=np.float32).reshape(2, 1, 5, 7)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    if count_include_pad:
        with pytest.raises(OrtBenchError, match="both ceil_mode and count_include_pad"):
            TorchGraph(model, ["Y"])(torch.tensor(x))
        return
    ours = TorchGraph(model, ["Y"])(torch.tensor(x))[0].numpy()
    np.testing.assert_allclose(ours, session.run(None, {"X": x})[0], rtol=1e-6)


#: Softmax before and from opset 13 (flattened tail, one axis), the reductions' forms and
#: Gelu's two:
#: (operator, opset, attributes, axes given as an input).
SHARED_OPERATORS = [
    ("Softmax", 11, {"axis": 1}, None),
    ("LogSoftmax", 11, {}, None),
    ("Softmax", 13, {"axis": 1}, None),
    ("ReduceSum", 13, {"keepdims": 0}, None),
    ("ReduceSum", 13, {"noop_with_empty_axes": 1}, None),
    ("ReduceSum", 13, {}, [-1, 0]),
    ("ReduceMean", 17, {"axes": [-1]}, None),
    ("ReduceMean", 18, {"keepdims": 0}, [0, 2]),
    ("Gelu", 20, {}, None),
    ("Softplus", 17, {}, None),
    ("Elu", 17, {"alpha": 0.5}, None),
    ("Gelu", 20, {"approximate": "tanh"}, None),
]


@pytest.mark.parametrize("library", ["torch", "jax"])
@pytest.mark.parametrize("op, opset, attributes, axes", SHARED_OPERATORS)
def test_both_runners_read_softmax_and_reductions_as_onnxruntime_does(
    library, op, opset, attributes, axes
):
    inputs = ["X"] if axes is None else ["X", "axes"]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["Y"], **attributes)],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [] if axes is None else [numpy_helper.from_array(np.array(axes, np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    # onnxruntime 1.19 refuses ReduceSum's no-op form: the spec makes it the identity
    noop = attributes.get("noop_with_empty_axes")
    expected = x if noop else session.run(None, {"X": x})[0]
    if library == "torch":
        output = TorchGraph(model, ["Y"])(torch.from_numpy(x))[0].numpy()
    else:
        pytest.importorskip("jax")
        from ortbench.jax_graph import JaxGraph

        output = np.asarray(JaxGraph(model, ["Y"], []).apply([], x)[0])
    assert output.shape == expected.shape
    np.testing.assert_allclose(output, expected, rtol=1e-5, atol=1e-6)
