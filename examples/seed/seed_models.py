"""The models the seed's examples assume, written with onnx's make_node and make_graph.

The seed built them with mlprodict (its numpy-to-ONNX decorator, its converter of linear
models), which ortbench does not use; these graphs have the same nodes and names.
"""

import numpy
from onnx import TensorProto, helper, numpy_helper


def fct_onnx():
    """The tutorial's fct as an ONNX graph: input x (N, 2), output y (N, 1) =
    -1 - 2 x0 + 3 x1 + x0^2 / 2 - x1^2 / 3."""

    def const(name, value, dtype=numpy.float32):
        return numpy_helper.from_array(numpy.array(value, dtype=dtype), name)

    nodes = [
        helper.make_node("Mul", ["x", "x"], ["out_mul_0"]),
        helper.make_node("Mul", ["out_mul_0", "init"], ["out_mul_0_1"]),
        helper.make_node("Mul", ["x", "init_1"], ["out_mul_0_2"]),
        helper.make_node("Add", ["out_mul_0_2", "out_mul_0_1"], ["out_add_0"]),
        helper.make_node("Slice", ["out_add_0", "init_2", "init_3", "init_2"], ["out_sli_0"]),
        helper.make_node("Squeeze", ["out_sli_0", "init_2"], ["out_squ_0"]),
        helper.make_node("Slice", ["out_add_0", "init_5", "init_2", "init_2"], ["out_sli_0_1"]),
        helper.make_node("Squeeze", ["out_sli_0_1", "init_2"], ["out_squ_0_1"]),
        helper.make_node("Add", ["out_squ_0_1", "out_squ_0"], ["out_add_0_1"]),
        helper.make_node("Add", ["out_add_0_1", "init_b10"], ["out_add_0_2"]),
        helper.make_node("Reshape", ["out_add_0_2", "init_b11"], ["y"]),
    ]
    initializers = [
        const("init", [[0.5, -0.33333]]),
        const("init_1", [[-2, 3]]),
        const("init_2", [1], numpy.int64),
        const("init_3", [2], numpy.int64),
        const("init_5", [0], numpy.int64),
        const("init_b10", [-1]),
        const("init_b11", [-1, 1], numpy.int64),
    ]
    graph = helper.make_graph(
        nodes,
        "fct",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def linear_onnx(model):
    """A fitted LinearRegression as ONNX: input X (N, d), output variable (N, 1)
    = X @ coef + intercept, with coef (d, 1) and intercept (1,) as initializers."""
    coef = numpy.asarray(model.coef_, dtype=numpy.float32).reshape(-1, 1)
    intercept = numpy.asarray([model.intercept_], dtype=numpy.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "coef"], ["mul"]),
            helper.make_node("Add", ["mul", "intercept"], ["variable"]),
        ],
        "linear_regression",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, coef.shape[0]])],
        [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [None, 1])],
        [numpy_helper.from_array(coef, "coef"), numpy_helper.from_array(intercept, "intercept")],
    )
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    onx.ir_version = 8
    return onx
