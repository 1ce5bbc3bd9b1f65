"""The torch runner of ONNX graphs against onnxruntime (forward) and torch (gradients)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")
from torch_modules import NETWORKS, PORTABLE_ONLY, export, exported_case, network  # noqa: E402

from ortbench.torch_graph import TorchGraph, unsupported  # noqa: E402


@pytest.mark.parametrize("opset", [17, 18, 20])
@pytest.mark.parametrize("name", [*NETWORKS, *PORTABLE_ONLY])
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


def ints(*values):
    return np.array(values, np.int64)


#: Softmax before and from opset 13 (flattened tail, one axis), the reductions' forms,
#: Gelu's two and the activations and normalizations of the portable backend alone:
#: (operator, opset, attributes, constant inputs after X of shape (2, 3, 4)).
SHARED_OPERATORS = [
    ("Softmax", 11, {"axis": 1}, []),
    ("LogSoftmax", 11, {}, []),
    ("Softmax", 13, {"axis": 1}, []),
    ("ReduceSum", 13, {"keepdims": 0}, []),
    ("ReduceSum", 13, {"noop_with_empty_axes": 1}, []),
    ("ReduceSum", 13, {}, [ints(-1, 0)]),
    ("ReduceMean", 17, {"axes": [-1]}, []),
    ("ReduceMean", 18, {"keepdims": 0}, [ints(0, 2)]),
    ("Gelu", 20, {}, []),
    ("Softplus", 17, {}, []),
    ("Elu", 17, {"alpha": 0.5}, []),
    ("Gelu", 20, {"approximate": "tanh"}, []),
    ("Selu", 17, {}, []),
    ("Selu", 17, {"alpha": 1.5, "gamma": 0.5}, []),
    ("Celu", 17, {"alpha": 0.5}, []),
    ("HardSigmoid", 17, {}, []),
    ("HardSigmoid", 17, {"alpha": 1 / 6}, []),
    ("HardSigmoid", 17, {"alpha": 0.9, "beta": 0.2}, []),
    ("HardSwish", 17, {}, []),
    ("Mish", 18, {}, []),
    ("PRelu", 17, {}, [np.array([0.25], np.float32)]),
    ("PRelu", 17, {}, [np.array([[0.5], [-0.2], [1.5]], np.float32)]),
    ("PRelu", 17, {}, [np.array([0.1, -0.3, 0.7, 2.0], np.float32)]),
    ("InstanceNormalization", 17, {}, [np.array([1.0, 0.5, -2.0], np.float32), np.array([0.0, 1.0, -0.5], np.float32)]),
    ("InstanceNormalization", 17, {"epsilon": 0.5}, [np.array([1.0, 0.5, -2.0], np.float32), np.array([0.0, 1.0, -0.5], np.float32)]),
]  # fmt: skip


def run_both(library, model, x, expected):
    """The runner of ``library`` (torch or jax) on the one-input model, against
    ``expected``: same shape, same values."""
    if library == "torch":
        output = TorchGraph(model, ["Y"])(torch.from_numpy(x))[0].numpy()
    else:
        pytest.importorskip("jax")
        from ortbench.jax_graph import JaxGraph

        output = np.asarray(JaxGraph(model, ["Y"], []).apply([], x)[0])
    assert output.shape == expected.shape
    np.testing.assert_allclose(output, expected, rtol=1e-5, atol=1e-6)


def one_node_model(op, opset, attributes, constants, x):
    """A graph of the node ``op`` on X (shaped as ``x``) and the constants (initializers)."""
    names = [f"c{k}" for k in range(len(constants))]
    graph = helper.make_graph(
        [helper.make_node(op, ["X", *names], ["Y"], **attributes)],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape)],
        [helper.make_empty_tensor_value_info("Y")],
        [numpy_helper.from_array(c, name) for c, name in zip(constants, names)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def onnxruntime_output(model, x):
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, {"X": x})[0]


@pytest.mark.parametrize("library", ["torch", "jax"])
@pytest.mark.parametrize("op, opset, attributes, constants", SHARED_OPERATORS)
def test_both_runners_read_each_operator_as_onnxruntime_does(
    library, op, opset, attributes, constants
):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32) * 2
    model = one_node_model(op, opset, attributes, constants, x)
    # onnxruntime 1.19 refuses ReduceSum's no-op form: the spec makes it the identity
    noop = attributes.get("noop_with_empty_axes")
    run_both(library, model, x, x if noop else onnxruntime_output(model, x))


#: Small integers as floats: ties along every axis.
TIES = np.random.default_rng(1).integers(0, 3, (3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("library", ["torch", "jax"])
@pytest.mark.parametrize(
    "attributes",
    [
        {},
        {"select_last_index": 1},
        {"axis": 1, "select_last_index": 1},
        {"axis": -1, "keepdims": 0, "select_last_index": 1},
        {"axis": 2, "keepdims": 0},
    ],
)
def test_both_runners_break_argmax_ties_as_onnxruntime_does(library, attributes):
    """The first maximum's index, or the last's with ``select_last_index``."""
    model = one_node_model("ArgMax", 13, attributes, [], TIES)
    expected = onnxruntime_output(model, TIES)
    if attributes.get("select_last_index"):  # the ties make the two choices differ
        first = onnxruntime_output(
            one_node_model("ArgMax", 13, {**attributes, "select_last_index": 0}, [], TIES), TIES
        )
        assert (expected != first).any()
    run_both(library, model, TIES, expected)


INT64_MAX = np.iinfo(np.int64).max


@pytest.mark.parametrize("library", ["torch", "jax"])
@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ([-10], [INT64_MAX], [0], [1]),  # a start before the axis: from its first
        ([7], [INT64_MAX], [1], [1]),  # a start past the axis: nothing
        ([-10], [-INT64_MAX], [2], [-1]),  # backwards from before the axis: the first only
        ([10], [-100], [2], [-1]),  # backwards from past the axis: all, reversed
        ([10, -7], [-10, 2], [1, 2], [-2, 3]),
        ([-1, 1], [-6, 100], [2, 0], [-1, 1]),  # the end before the axis: down to index 0
        ([0, 4], [5, -INT64_MAX], [2, -2], [2, -3]),
        ([2], [2], [1], [1]),  # empty
        ([1, 3], [-1, 1], [0, 1], [1, -1]),
        ([-3], [10], [-1], [2]),
    ],
)
def test_both_runners_clamp_slice_bounds_as_onnxruntime_does(library, starts, ends, axes, steps):
    """Bounds out of the axis clamp into it as the ONNX spec says, not as Python slices."""
    x = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    constants = [ints(*starts), ints(*ends), ints(*axes), ints(*steps)]
    model = one_node_model("Slice", 13, {}, constants, x)
    run_both(library, model, x, onnxruntime_output(model, x))
