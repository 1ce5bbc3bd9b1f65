"""The JAX runner of ONNX graphs against onnxruntime (forward) and torch (gradients)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
from torch_modules import NETWORKS, PORTABLE_ONLY, exported_case  # noqa: E402

from ortbench.jax_graph import JaxGraph  # noqa: E402
from ortbench.training import OrtBenchError  # noqa: E402

RNG = np.random.default_rng(0)
#: Float data, small integers as floats (ties for ArgMax and the comparisons), integers
#: of both signs (Mod), booleans (Not).
FLOATS = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
TIES = RNG.integers(0, 3, (2, 3, 4)).astype(np.float32)
INTEGERS = RNG.integers(-9, 10, (3, 4)).astype(np.int64)
BOOLEANS = RNG.random((3, 4)) > 0.5
IMAGE = RNG.standard_normal((2, 1, 5, 7)).astype(np.float32)
INT64_MAX = np.iinfo(np.int64).max


def ints(*values):
    return np.array(values, np.int64)


def floats(*values):
    return np.array(values, np.float32)


#: (operator, opset, attributes, data X, constant inputs after X: None for an omitted one,
#: number of outputs)
OPERATORS = [
    ("ArgMax", 13, {}, TIES, [], 1),
    ("ArgMax", 13, {"axis": -1, "keepdims": 0}, TIES, [], 1),
    ("ArgMax", 13, {"axis": 1, "select_last_index": 1}, TIES, [], 1),
    ("ArgMax", 13, {"axis": 2, "keepdims": 0, "select_last_index": 1}, TIES, [], 1),
    ("AveragePool", 18, {"kernel_shape": [2, 2]}, IMAGE, [], 1),
    ("AveragePool", 18, {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, FLOATS[0], [], 1),
    ("AveragePool", 18, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, IMAGE, [], 1),
    ("AveragePool", 18, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}, IMAGE, [], 1),
    ("AveragePool", 18, {"kernel_shape": [2, 3], "pads": [0, 1, 1, 0]}, IMAGE, [], 1),
    ("AveragePool", 18, {"kernel_shape": [2, 3], "pads": [0, 1, 1, 0], "count_include_pad": 1}, IMAGE, [], 1),
    ("AveragePool", 18, {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, IMAGE, [], 1),
    ("AveragePool", 19, {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [1, 1, 1, 1]}, IMAGE, [], 1),
    ("AveragePool", 19, {"kernel_shape": [2, 2], "dilations": [1, 2], "count_include_pad": 1, "pads": [1, 1, 1, 1]}, IMAGE, [], 1),
    ("AveragePool", 18, {"kernel_shape": [2, 2], "auto_pad": "VALID", "pads": [1, 1, 1, 1]}, IMAGE, [], 1),
    ("BatchNormalization", 15, {}, FLOATS, [floats(1, 2, 3), floats(0, 1, -1), floats(0.5, 0, -2), floats(1, 0.5, 2)], 1),
    ("BatchNormalization", 15, {"epsilon": 0.1}, FLOATS[0, :, :, 0].T, [floats(1, 2, 3), floats(0, 1, -1), floats(0.5, 0, -2), floats(1, 0.5, 2)], 1),
    ("Celu", 12, {"alpha": 0.5}, FLOATS, [], 1),
    ("Clip", 13, {}, FLOATS, [floats(-0.5).reshape(()), floats(0.7).reshape(())], 1),
    ("Clip", 13, {}, FLOATS, [None, floats(0.7).reshape(())], 1),
    ("Clip", 13, {}, FLOATS, [floats(-0.5).reshape(())], 1),
    ("Clip", 13, {}, FLOATS, [], 1),
    ("Clip", 6, {"min": -0.5, "max": 0.7}, FLOATS, [], 1),
    ("Clip", 6, {"max": 0.7}, FLOATS, [], 1),
    ("Dropout", 13, {}, FLOATS, [], 2),
    ("Dropout", 13, {}, FLOATS, [floats(0.5).reshape(()), np.array(False)], 2),
    ("Dropout", 10, {"ratio": 0.3}, FLOATS, [], 1),
    ("Equal", 13, {}, TIES, [floats(0, 1, 2, 1)], 1),
    ("Greater", 13, {}, TIES, [floats(0, 1, 2, 1)], 1),
    ("Less", 13, {}, TIES, [floats(0, 1, 2, 1)], 1),
    ("Expand", 13, {}, FLOATS[0, :, :1, 0], [ints(2, 1, 4)], 1),
    ("Expand", 13, {}, FLOATS[0, :, :1, 0], [ints(1, 1)], 1),
    ("GlobalAveragePool", 1, {}, FLOATS, [], 1),
    ("GlobalAveragePool", 1, {}, FLOATS[0], [], 1),
    ("HardSigmoid", 6, {"alpha": 0.9, "beta": 0.2}, FLOATS, [], 1),
    ("HardSwish", 14, {}, 3 * FLOATS, [], 1),
    ("InstanceNormalization", 6, {"epsilon": 0.1}, FLOATS, [floats(1, 2, -3), floats(0, 1, -1)], 1),
    ("InstanceNormalization", 6, {}, FLOATS[0], [floats(1, 0.5, 2, -1), floats(0.5, 0, 1, 2)], 1),
    ("LeakyRelu", 16, {}, FLOATS, [], 1),
    ("LeakyRelu", 16, {"alpha": 0.2}, FLOATS, [], 1),
    ("Max", 13, {}, TIES, [floats(0, 1, 2, 1), np.full((3, 1), 1.5, np.float32)], 1),
    ("Max", 13, {}, TIES, [], 1),
    ("Min", 13, {}, TIES, [floats(0, 1, 2, 1), np.full((3, 1), 1.5, np.float32)], 1),
    ("Mish", 18, {}, FLOATS, [], 1),
    ("Mod", 13, {}, INTEGERS, [ints(4, -3, 5, -7)], 1),
    ("Mod", 13, {"fmod": 1}, INTEGERS, [ints(4, -3, 5, -7)], 1),
    ("Mod", 13, {"fmod": 1}, FLOATS, [floats(0.5, -0.3, 2, 1, -1)], 1),
    ("Not", 1, {}, BOOLEANS, [], 1),
    ("PRelu", 16, {}, FLOATS, [floats(0.25)], 1),
    ("PRelu", 16, {}, FLOATS, [floats(0.5, -0.2, 1.5).reshape(3, 1, 1)], 1),
    ("Pow", 15, {}, FLOATS, [floats(2).reshape(())], 1),
    ("Pow", 15, {}, np.abs(FLOATS), [floats(0.5, 1.5, -1, 3, 0)], 1),
    ("Pow", 15, {}, FLOATS, [ints(2, 3, 0, 1, 4)], 1),
    ("Reciprocal", 13, {}, FLOATS, [], 1),
    ("Selu", 6, {}, FLOATS, [], 1),
    ("Selu", 6, {"alpha": 1.5, "gamma": 0.5}, FLOATS, [], 1),
    ("Slice", 13, {}, FLOATS, [ints(1), ints(INT64_MAX)], 1),
    ("Slice", 13, {}, FLOATS, [ints(1, -4), ints(-1, 100), ints(-1, 2)], 1),
    ("Slice", 13, {}, FLOATS, [ints(-1, 0), ints(-100, 2), ints(-2, 1), ints(-2, 1)], 1),
    ("Slice", 13, {}, FLOATS, [ints(-10, 10), ints(-INT64_MAX, 0), ints(3, 1), ints(-1, -2)], 1),
    ("Slice", 13, {}, FLOATS, [ints(2), ints(-1), None, ints(-1)], 1),
    ("Slice", 13, {}, FLOATS, [ints(0, 1), ints(2, 3), ints(0, 2), None], 1),
    ("Slice", 9, {"starts": [1, 0], "ends": [3, -1], "axes": [2, -1]}, FLOATS, [], 1),
    ("Slice", 9, {"starts": [1, 1], "ends": [2, 1000]}, FLOATS, [], 1),
    ("Split", 13, {"axis": 1}, FLOATS, [ints(1, 2)], 2),
    ("Split", 13, {"axis": -1}, FLOATS, [], 5),
    ("Split", 11, {"axis": 2, "split": [3, 1]}, FLOATS, [], 2),
    ("Split", 11, {}, FLOATS, [], 2),
    ("Split", 18, {"axis": -1, "num_outputs": 3}, FLOATS, [], 3),
    ("Split", 18, {"axis": 2}, FLOATS, [ints(1, 0, 3)], 3),
]  # fmt: skip


def one_node_model(op, opset, attributes, x, constants, outputs):
    """A graph of the node ``op`` on X and the constants (initializers), as a model."""
    names = ["" if c is None else f"c{k}" for k, c in enumerate(constants)]
    initializers = [
        numpy_helper.from_array(c, name) for c, name in zip(constants, names) if c is not None
    ]
    graph = helper.make_graph(
        [helper.make_node(op, ["X", *names], outputs, name="node", **attributes)],
        "g",
        [helper.make_tensor_value_info("X", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_empty_tensor_value_info(name) for name in outputs],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def assert_as_onnxruntime(model, outputs, x):
    """The runner's outputs, run eagerly and under ``jit``, against onnxruntime's."""
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    expected = session.run(outputs, {"X": x})
    runner = JaxGraph(model, outputs, [])
    for found in (runner.apply([], x), jax.jit(lambda x: runner.apply([], x))(x)):
        for ours, theirs in zip(found, expected, strict=True):
            assert ours.shape == theirs.shape
            np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "op, opset, attributes, x, constants, outputs",
    OPERATORS,
    ids=[f"{case[0]}{case[1]}-{k}" for k, case in enumerate(OPERATORS)],
)
def test_the_runner_reads_each_operator_as_onnxruntime_does(
    op, opset, attributes, x, constants, outputs
):
    names = [f"Y{k}" for k in range(outputs)]
    model = one_node_model(op, opset, attributes, x, constants, names)
    assert_as_onnxruntime(model, names, x)


@pytest.mark.parametrize(
    "nodes",
    [
        [("ConstantOfShape", ["S"], {})],
        [("ConstantOfShape", ["S"], {"value": numpy_helper.from_array(ints(7))})],
        [("Expand", ["c", "S"], {})],
        [("Slice", ["S", "one", "big"], {}), ("ConstantOfShape", ["Z0"], {}), ("Add", ["X", "Z1"], {})],
    ],
)  # fmt: skip
def test_values_computed_from_the_input_shape_stay_static_under_jit(nodes):
    """Shapes read by Shape nodes decide ConstantOfShape's and Expand's outputs."""
    made = [helper.make_node("Shape", ["X"], ["S"])]
    for k, (op, inputs, attributes) in enumerate(nodes):
        output = "Y" if k == len(nodes) - 1 else f"Z{k}"
        made.append(helper.make_node(op, inputs, [output], **attributes))
    constants = {"c": floats(2.0).reshape(1, 1, 1), "one": ints(1), "big": ints(INT64_MAX)}
    graph = helper.make_graph(
        made,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, IMAGE.shape)],
        [helper.make_empty_tensor_value_info("Y")],
        [numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    assert_as_onnxruntime(model, ["Y"], IMAGE)


@pytest.mark.parametrize(
    "op, attributes, constants, refused",
    [
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1}, [], "AveragePool with both ceil_mode and count_include_pad"),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [3, 3], "ceil_mode": 1, "pads": [0, 0, 0, 2]}, [], "AveragePool with ceil_mode and a window in the end pads"),
        ("AveragePool", {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}, [], "AveragePool with auto_pad=SAME_UPPER"),
        ("BatchNormalization", {"training_mode": 1}, [floats(1), floats(0), floats(0), floats(1)], "BatchNormalization with training_mode=1"),
        ("Dropout", {}, [floats(0.5).reshape(()), np.array(True)], "Dropout in training mode"),
    ],
)  # fmt: skip
def test_a_form_the_runner_cannot_compute_exactly_is_refused(op, attributes, constants, refused):
    model = one_node_model(op, 18, attributes, IMAGE, constants, ["Y"])
    with pytest.raises(OrtBenchError, match=rf"^jax runs no {refused} \(node 'node'\)$"):
        JaxGraph(model, ["Y"], []).apply([], IMAGE)


@pytest.mark.parametrize("opset", [17, 18, 20])
@pytest.mark.parametrize("name", [*NETWORKS, *PORTABLE_ONLY])
def test_the_runner_computes_and_differentiates_the_exported_network(name, opset):
    case = exported_case(name, opset)
    module, model, x, expected = case.module, case.model, case.x, case.expected
    parameters, trained = case.parameters, case.trained
    runner = JaxGraph(model, ["Y"], trained)
    output = jax.jit(lambda w, x: runner.apply(w, x)[0])(runner.initial, x.numpy())
    np.testing.assert_allclose(np.asarray(output), expected, rtol=1e-4, atol=1e-5)

    cotangent = torch.randn(output.shape, generator=torch.Generator().manual_seed(2))
    weights_grad, x_grad = jax.jit(
        jax.grad(lambda w, x, c: (runner.apply(w, x)[0] * c).sum(), argnums=(0, 1))
    )(runner.initial, x.numpy(), cotangent.numpy())
    theirs = x.clone().requires_grad_(True)
    (module(theirs) * cotangent).sum().backward()
    np.testing.assert_allclose(np.asarray(x_grad), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)
    for weight, grad in zip(trained, weights_grad, strict=True):
        np.testing.assert_allclose(
            np.asarray(grad), parameters[weight].grad.numpy(), rtol=1e-4, atol=1e-5,
            err_msg=weight,
        )  # fmt: skip


def test_a_cast_to_64_bits_keeps_jax_s_own_type_without_a_warning():
    """jax runs 32-bit integers unless its 64-bit mode is on: a Cast to INT64 of a traced
    value (an embedding's indices) gives int32 and no warning about the truncation."""
    import warnings

    model = one_node_model("Cast", 17, {"to": TensorProto.INT64}, FLOATS, [], ["Y"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        output = jax.jit(lambda x: JaxGraph(model, ["Y"], []).apply([], x)[0])(FLOATS)
    assert output.dtype == jax.dtypes.canonicalize_dtype(np.int64)
    assert not [w for w in caught if "int64" in str(w.message)], [str(w.message) for w in caught]
