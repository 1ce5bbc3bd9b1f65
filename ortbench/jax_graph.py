"""An ONNX graph as a pure ``jax.numpy`` function: JAX as the peer of the networks that
scikit-learn cannot express (the ``cnn`` and ``transformer`` problems, a user's model).

:class:`JaxGraph` turns the nodes the requested outputs need into one function of the
trained weights and the data inputs, which ``jax.jit`` traces and ``jax.grad``
differentiates: exactly the user's network, from the same weights, without any ONNX
gradient rule. The other initializers, every shape and what nodes compute from these
alone stay numpy values, so shapes are static under ``jit``. Importing this module imports
jax (an optional dependency).
"""

from __future__ import annotations

import math
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
    ints,
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


def _pooled_pads(node, sizes, kernel, strides, dilations, pads) -> list[tuple[int, int]]:
    """The paddings of a pooling node, the end ones widened for ``ceil_mode``'s last,
    partial windows."""
    if not node.get("ceil_mode", 0):
        return pads
    widened = []
    for size, k, stride, dilation, (begin, end) in zip(sizes, kernel, strides, dilations, pads):
        span = dilation * (k - 1) + 1
        last = -(-(size + begin + end - span) // stride) * stride
        if last >= size + begin:
            # onnxruntime 1.19 fills such a window with garbage; newer specs drop it
            raise _refusal(
                node, f"{node.proto.op_type} with ceil_mode and a window in the end pads"
            )
        widened.append((begin, last + span - size - begin))
    return widened


def _average_pool(node, x):
    if node.get("ceil_mode", 0) and node.get("count_include_pad", 0):
        # onnxruntime 1.19 divides a window that overhangs the padded input by the whole
        # kernel, torch by its part inside
        raise _refusal(node, "AveragePool with both ceil_mode and count_include_pad")
    data = x[0]
    rank = data.ndim - 2
    kernel = list(node.get("kernel_shape"))
    strides, dilations, pads = _spatial(node, rank)
    pads = _pooled_pads(node, data.shape[2:], kernel, strides, dilations, pads)

    def window_sums(a):
        return jax.lax.reduce_window(
            a,
            0.0,
            jax.lax.add,
            window_dimensions=(1, 1, *kernel),
            window_strides=(1, 1, *strides),
            padding=((0, 0), (0, 0), *pads),
            window_dilation=(1, 1, *dilations),
        )

    if node.get("count_include_pad", 0):
        return [window_sums(data) / math.prod(kernel)]
    return [window_sums(data) / window_sums(jnp.ones((1, 1, *data.shape[2:]), data.dtype))]


def _batch_norm(node, x):
    if node.get("training_mode", 0):
        raise _refusal(node, "BatchNormalization with training_mode=1")
    data, scale, bias, mean, var = x[:5]
    shape = (-1,) + (1,) * (data.ndim - 2)
    inverse = jax.lax.rsqrt(var + node.get("epsilon", 1e-5)) * scale
    return [(data - mean.reshape(shape)) * inverse.reshape(shape) + bias.reshape(shape)]


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


def _instance_norm(node, x):
    data, scale, bias = x
    dims = tuple(range(2, data.ndim))
    mean = data.mean(axis=dims, keepdims=True)
    centered = data - mean
    inverse = jax.lax.rsqrt(
        (centered * centered).mean(axis=dims, keepdims=True) + node.get("epsilon", 1e-5)
    )
    shape = (-1,) + (1,) * (data.ndim - 2)
    return [centered * inverse * scale.reshape(shape) + bias.reshape(shape)]


def _selu(node, x):
    alpha = node.get("alpha", 1.67326319217681884765625)
    return [jax.nn.elu(x[0], alpha) * node.get("gamma", 1.05070102214813232421875)]


def _hard_sigmoid(node, x):
    return [jnp.clip(x[0] * node.get("alpha", 0.2) + node.get("beta", 0.5), 0.0, 1.0)]


def _transpose(node, x):
    perm = node.get("perm") or list(reversed(range(x[0].ndim)))
    return [jnp.transpose(x[0], perm)]


def _unsqueeze(node, x):
    return [jnp.expand_dims(x[0], tuple(axis_argument(node, x, 1)))]


def _squeeze(node, x):
    axes = axis_argument(node, x, 1)
    return [jnp.squeeze(x[0], None if axes is None else tuple(axes))]


def _as_type(value, dtype):
    """``value`` in ``dtype``; a jax array in the type jax keeps for it (32 bits unless
    jax's 64-bit mode is on), without the warning an explicit 64-bit request gives."""
    if not isinstance(value, np.ndarray):
        dtype = jax.dtypes.canonicalize_dtype(dtype)
    return value.astype(dtype)


def _cast(node, x):
    to = node.get("to")
    if to not in _DTYPES:
        raise _refusal(node, f"Cast to type {to}")
    return [_as_type(x[0], _DTYPES[to])]


def _onnx_slice(start: int, end: int, step: int, size: int) -> slice:
    """Slice's bounds on an axis of ``size`` as a Python slice: a negative bound counts
    from the end, then both clamp into the axis, the end to just before it going
    backwards (Python empties a backward slice that starts before the axis instead)."""
    high = size if step > 0 else size - 1
    start = min(max(start + size if start < 0 else start, 0), high)
    end = min(max(end + size if end < 0 else end, 0 if step > 0 else -1), high)
    return slice(start, None if end < 0 else end, step)


def _slice(node, x):
    """Slice: starts, ends, axes and steps as inputs from opset 10, the first three as
    attributes before."""
    data = x[0]
    starts = axis_argument(node, x, 1, "starts")
    ends = axis_argument(node, x, 2, "ends")
    axes = axis_argument(node, x, 3) or range(len(starts))
    steps = axis_argument(node, x, 4, "steps") or [1] * len(starts)
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        index[axis] = _onnx_slice(start, end, step, data.shape[axis])
    return [data[tuple(index)]]


def _split(node, x):
    """Split: sizes as an input from opset 13, an attribute before; else equal parts, the
    last one smaller (opset 18)."""
    data = x[0]
    axis = node.get("axis", 0) % data.ndim
    sizes = axis_argument(node, x, 1, "split")
    if sizes is None:
        parts = len(node.proto.output)
        size = -(-data.shape[axis] // parts)
        sizes = [size] * (parts - 1) + [data.shape[axis] - size * (parts - 1)]
    return jnp.split(data, np.cumsum(sizes)[:-1], axis=axis)


def _arg_max(node, x):
    data, axis = x[0], node.get("axis", 0)
    keep = bool(node.get("keepdims", 1))
    if node.get("select_last_index", 0):
        last = jnp.argmax(jnp.flip(data, axis), axis=axis, keepdims=keep)
        return [data.shape[axis] - 1 - last]
    return [jnp.argmax(data, axis=axis, keepdims=keep)]


def _clip(node, x):
    """Clip: the bounds as inputs from opset 11, attributes before; either may be absent."""
    low = x[1] if len(x) > 1 and x[1] is not None else node.get("min")
    high = x[2] if len(x) > 2 and x[2] is not None else node.get("max")
    return [jnp.clip(x[0], low, high)]


def _constant_of_shape(node, x):
    value = node.get("value")
    fill = numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
    return [np.full(ints(x[0]), fill.reshape(()), fill.dtype)]


def _dropout(node, x):
    if len(x) > 2 and x[2] is not None and bool(x[2]):
        raise _refusal(node, "Dropout in training mode")
    return [x[0], jnp.ones_like(x[0], dtype=bool)]


def _expand(node, x):
    return [jnp.broadcast_to(x[0], np.broadcast_shapes(x[0].shape, tuple(ints(x[1]))))]


def _folded(op: Op) -> Op:
    """``op`` computed when ``jit`` traces it, into numpy arrays, where all its inputs are
    numpy arrays: the shapes and the arithmetic on them stay static."""

    def run(node, x):
        if not all(v is None or isinstance(v, np.ndarray) for v in x):
            return op(node, x)
        with jax.ensure_compile_time_eval():
            return [np.asarray(v) for v in op(node, x)]

    return run


_OPS: dict[str, Op] = {
    "Abs": unary(jnp.abs),
    "Add": binary(jnp.add),
    "ArgMax": _arg_max,
    "AveragePool": _average_pool,
    "BatchNormalization": _batch_norm,
    "Cast": _cast,
    "CastLike": lambda node, x: [_as_type(x[0], x[1].dtype)],
    "Celu": lambda node, x: [jax.nn.celu(x[0], node.get("alpha", 1.0))],
    "Clip": _clip,
    "Concat": lambda node, x: [jnp.concatenate(x, axis=node.get("axis"))],
    "Constant": lambda node, x: [constant_array(node)],
    "ConstantOfShape": _constant_of_shape,
    "Conv": _conv,
    "Div": binary(jnp.divide),
    "Dropout": _dropout,
    "Equal": binary(jnp.equal),
    "Elu": lambda node, x: [jax.nn.elu(x[0], node.get("alpha", 1.0))],
    "Erf": unary(jax.scipy.special.erf),
    "Exp": unary(jnp.exp),
    "Expand": _expand,
    "Flatten": flatten,
    "Gather": lambda node, x: [jnp.take(x[0], x[1], axis=node.get("axis", 0))],
    "Gelu": lambda node, x: [
        jax.nn.gelu(x[0], approximate=node.get("approximate", "none") == "tanh")
    ],
    "Gemm": gemm,
    "GlobalAveragePool": lambda node, x: [
        x[0].mean(axis=tuple(range(2, x[0].ndim)), keepdims=True)
    ],
    "Greater": binary(jnp.greater),
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": unary(jax.nn.hard_swish),
    "Identity": lambda node, x: [x[0]],
    "InstanceNormalization": _instance_norm,
    "LayerNormalization": _layer_norm,
    "LeakyRelu": lambda node, x: [jax.nn.leaky_relu(x[0], node.get("alpha", 0.01))],
    "Less": binary(jnp.less),
    "Log": unary(jnp.log),
    "LogSoftmax": softmax(jax.nn.log_softmax, "axis"),
    "MatMul": binary(jnp.matmul),
    "Max": variadic(jnp.maximum),
    "MaxPool": _max_pool,
    "Min": variadic(jnp.minimum),
    "Mish": unary(jax.nn.mish),
    "Mod": lambda node, x: [(jnp.fmod if node.get("fmod", 0) else jnp.remainder)(*x)],
    "Mul": binary(jnp.multiply),
    "Neg": unary(jnp.negative),
    "Not": unary(jnp.logical_not),
    "Pow": lambda node, x: [jnp.power(x[0], x[1]).astype(x[0].dtype)],
    "PRelu": lambda node, x: [jnp.where(x[0] >= 0, x[0], x[0] * x[1])],
    "Reciprocal": unary(jnp.reciprocal),
    "ReduceMean": reduce(jnp.mean, "axis", "keepdims"),
    "ReduceSum": reduce(jnp.sum, "axis", "keepdims"),
    "Relu": unary(jax.nn.relu),
    "Reshape": reshape,
    "Selu": _selu,
    "Shape": lambda node, x: [np.array(x[0].shape[node.get("start", 0) : node.get("end")])],
    "Sigmoid": unary(jax.nn.sigmoid),
    "Slice": _slice,
    "Softmax": softmax(jax.nn.softmax, "axis"),
    "Softplus": unary(jax.nn.softplus),
    "Split": _split,
    "Sqrt": unary(jnp.sqrt),
    "Squeeze": _squeeze,
    "Sub": binary(jnp.subtract),
    "Sum": variadic(jnp.add),
    "Tanh": unary(jnp.tanh),
    "Transpose": _transpose,
    "Unsqueeze": _unsqueeze,
    "Where": lambda node, x: [jnp.where(x[0], x[1], x[2])],
}

#: The ONNX operators (default domain) the runner executes.
OPS: dict[str, Op] = {name: _folded(op) for name, op in _OPS.items()}


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
