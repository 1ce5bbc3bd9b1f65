"""An ONNX graph as a pure ``jax.numpy`` function: JAX as the peer of the networks that
scikit-learn cannot express (the ``cnn`` and ``transformer`` problems, a user's model).

:class:`JaxGraph` turns the nodes the requested outputs need into one function of the
trained weights and the data inputs, which ``jax.jit`` traces and ``jax.grad``
differentiates: exactly the user's network, from the same weights, without any ONNX
gradient rule. The other initializers and every shape stay numpy values, so shapes are
static under ``jit``. Importing this module imports jax (an optional dependency).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import onnx
from onnx import numpy_helper

from . import graph_interpreter as interpreter
from .graph_interpreter import (
    Node,
    Op,
    axis_argument,
    binary,
    constant_array,
    flatten,
    gemm,
    reduce,
    reshape,
    softmax,
    unary,
    variadic,
)
from .training.errors import OrtBenchError

#: ONNX element types -> numpy dtypes (Cast).
_DTYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.BOOL: np.bool_,
}


def _refusal(node: Node, what: str) -> OrtBenchError:
    return OrtBenchError(f"jax runs no {what} (node {node.proto.name!r})")


def _spatial(node, rank: int) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """Strides, dilations and (begin, end) paddings of a convolution or pooling node."""
    auto = node.get("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "VALID"):
        raise _refusal(node, f"{node.proto.op_type} with auto_pad={auto}")
    pads = list(node.get("pads", [0] * 2 * rank)) if auto == "NOTSET" else [0] * 2 * rank
    strides = list(node.get("strides", [1] * rank))
    dilations = list(node.get("dilations", [1] * rank))
    return strides, dilations, list(zip(pads[:rank], pads[rank:]))


def _conv(node, x):
    data, weight = x[0], x[1]
    rank = data.ndim - 2
    strides, dilations, pads = _spatial(node, rank)
    letters = "DHW"[-rank:]
    out = jax.lax.conv_general_dilated(
        data,
        weight,
        window_strides=strides,
        padding=pads,
        rhs_dilation=dilations,
        dimension_numbers=(f"NC{letters}", f"OI{letters}", f"NC{letters}"),
        feature_group_count=node.get("group", 1),
    )
    if len(x) > 2 and x[2] is not None:
        out = out + x[2].reshape((1, -1) + (1,) * rank)
    return [out]


def _max_pool(node, x):
    if len(node.proto.output) > 1 and node.proto.output[1]:
        raise _refusal(node, "MaxPool with Indices")
    if node.get("ceil_mode", 0):
        raise _refusal(node, "MaxPool with ceil_mode=1")
    data = x[0]
    rank = data.ndim - 2
    strides, dilations, pads = _spatial(node, rank)
    out = jax.lax.reduce_window(
        data,
        -jnp.inf,
        jax.lax.max,
        window_dimensions=(1, 1, *node.get("kernel_shape")),
        window_strides=(1, 1, *strides),
        padding=((0, 0), (0, 0), *pads),
        window_dilation=(1, 1, *dilations),
    )
    return [out]


def _layer_norm(node, x):
    data, scale = x[0], x[1]
    axis = node.get("axis", -1) % data.ndim
    dims = tuple(range(axis, data.ndim))
    mean = data.mean(axis=dims, keepdims=True)
    centered = data - mean
    inverse = jax.lax.rsqrt(
        (centered * centered).mean(axis=dims, keepdims=True) + node.get("epsilon", 1e-5)
    )
    out = centered * inverse * scale
    if len(x) > 2 and x[2] is not None:
        out = out + x[2]
    return [out, mean, inverse]


def _transpose(node, x):
    perm = node.get("perm") or list(reversed(range(x[0].ndim)))
    return [jnp.transpose(x[0], perm)]


def _unsqueeze(node, x):
    return [jnp.expand_dims(x[0], tuple(axis_argument(node, x, 1)))]


def _squeeze(node, x):
    axes = axis_argument(node, x, 1)
    return [jnp.squeeze(x[0], None if axes is None else tuple(axes))]


def _cast(node, x):
    to = node.get("to")
    if to not in _DTYPES:
        raise _refusal(node, f"Cast to type {to}")
    return [x[0].astype(_DTYPES[to])]


#: The ONNX operators (default domain) the runner executes.
OPS: dict[str, Op] = {
    "Abs": unary(jnp.abs),
    "Add": binary(jnp.add),
    "Cast": _cast,
    "Concat": lambda node, x: [jnp.concatenate(x, axis=node.get("axis"))],
    "Constant": lambda node, x: [constant_array(node)],
    "Conv": _conv,
    "Div": binary(jnp.divide),
    "Erf": unary(jax.scipy.special.erf),
    "Exp": unary(jnp.exp),
    "Flatten": flatten,
    "Gather": lambda node, x: [jnp.take(x[0], x[1], axis=node.get("axis", 0))],
    "Gelu": lambda node, x: [
        jax.nn.gelu(x[0], approximate=node.get("approximate", "none") == "tanh")
    ],
    "Gemm": gemm,
    "Identity": lambda node, x: [x[0]],
    "LayerNormalization": _layer_norm,
    "Log": unary(jnp.log),
    "LogSoftmax": softmax(jax.nn.log_softmax, "axis"),
    "MatMul": binary(jnp.matmul),
    "MaxPool": _max_pool,
    "Mul": binary(jnp.multiply),
    "Neg": unary(jnp.negative),
    "ReduceMean": reduce(jnp.mean, "axis", "keepdims"),
    "ReduceSum": reduce(jnp.sum, "axis", "keepdims"),
    "Relu": unary(jax.nn.relu),
    "Reshape": reshape,
    "Shape": lambda node, x: [np.array(x[0].shape[node.get("start", 0) : node.get("end")])],
    "Sigmoid": unary(jax.nn.sigmoid),
    "Softmax": softmax(jax.nn.softmax, "axis"),
    "Sqrt": unary(jnp.sqrt),
    "Squeeze": _squeeze,
    "Sub": binary(jnp.subtract),
    "Sum": variadic(jnp.add),
    "Tanh": unary(jnp.tanh),
    "Transpose": _transpose,
    "Unsqueeze": _unsqueeze,
    "Where": lambda node, x: [jnp.where(x[0], x[1], x[2])],
}


def unsupported(model: onnx.ModelProto, outputs: Sequence[str]) -> str | None:
    """Why jax cannot run the nodes the outputs need, or None when it can
    (``jax runs no ONNX operator <op> (node <name>)`` for the first one it cannot run)."""
    return interpreter.unsupported(model, outputs, OPS, "jax")


class JaxGraph:
    """An ONNX graph as the pure function :meth:`apply` of its trained weights and inputs.

    Parameters
    ----------
    model : onnx.ModelProto
        The graph to run.
    outputs : sequence of str
        The tensors :meth:`apply` returns, in order.
    trained : sequence of str
        The initializers :meth:`apply` takes as arguments (:attr:`initial` holds their
        values); the others are constants.

    Raises
    ------
    OrtBenchError
        When a node the outputs need is not an operator the runner executes.
    """

    def __init__(self, model: onnx.ModelProto, outputs: Sequence[str], trained: Sequence[str]):
        reason = unsupported(model, outputs)
        if reason:
            raise OrtBenchError(reason)
        graph = model.graph
        opset = interpreter.graph_opset(model)
        self.outputs = list(outputs)
        self.trained = list(trained)
        nodes = [Node(n, opset) for n in interpreter.needed_nodes(graph, outputs)]
        values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        #: The trained weights' initial values, in the order of ``trained``.
        self.initial = tuple(np.array(values.pop(name), dtype=np.float32) for name in trained)
        for node in nodes:  # constants are computed once
            if node.proto.op_type == "Constant":
                values[node.proto.output[0]] = constant_array(node)
        self._constants = values
        self._nodes = [n for n in nodes if n.proto.op_type != "Constant"]
        known = set(values) | set(trained)
        self.input_names = [i.name for i in graph.input if i.name not in known]

    def apply(self, weights: Sequence, *inputs) -> list:
        """The graph's outputs for the trained ``weights`` and its data inputs, in order."""
        env = dict(self._constants)
        env.update(zip(self.trained, weights))
        env.update(zip(self.input_names, inputs))
        interpreter.run_nodes(self._nodes, OPS, env)
        return [env[name] for name in self.outputs]
