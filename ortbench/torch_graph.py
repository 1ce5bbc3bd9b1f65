"""An ONNX graph run with torch operations: torch as the peer of any model, and the
independent gradient reference of the tests.

:class:`TorchGraph` interprets the nodes of a graph one by one with torch functions; the
initializers to train become ``torch.nn.Parameter`` objects, the others constant tensors.
Autograd then differentiates exactly the user's network, from the same weights, without
any ONNX gradient rule. Importing this module imports torch (an optional dependency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
import torch
import torch.nn.functional as F
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

#: ONNX element types -> torch dtypes (Cast, ConstantOfShape).
_DTYPES = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.BOOL: torch.bool,
}


def _div(node, x):
    a, b = x
    if not a.is_floating_point() and not b.is_floating_point():
        return [torch.div(a, b, rounding_mode="trunc")]
    return [a / b]


def _pads(node, rank: int) -> tuple[list[int], list[int]]:
    """(begin, end) paddings of each spatial axis; raises for automatic padding but VALID."""
    auto = node.get("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "VALID"):
        raise OrtBenchError(
            f"torch runs no {node.proto.op_type} with auto_pad={auto} (node {node.proto.name!r})"
        )
    pads = list(node.get("pads", [0] * 2 * rank)) if auto == "NOTSET" else [0] * 2 * rank
    return pads[:rank], pads[rank:]


def _padded(node, data, rank: int, value: float = 0.0):
    """The input padded by hand where begin and end paddings differ; else the symmetric
    paddings torch's functions take."""
    begin, end = _pads(node, rank)
    if begin == end:
        return data, begin
    flat = []
    for b, e in zip(reversed(begin), reversed(end)):
        flat += [b, e]
    return F.pad(data, flat, value=value), [0] * rank


def _conv(node, x):
    data, weight = x[0], x[1]
    bias = x[2] if len(x) > 2 else None
    rank = data.dim() - 2
    data, padding = _padded(node, data, rank)
    function = (F.conv1d, F.conv2d, F.conv3d)[rank - 1]
    return [
        function(
            data,
            weight,
            bias,
            stride=list(node.get("strides", [1] * rank)),
            padding=padding,
            dilation=list(node.get("dilations", [1] * rank)),
            groups=node.get("group", 1),
        )
    ]


def _max_pool(node, x):
    if len(node.proto.output) > 1 and node.proto.output[1]:
        raise OrtBenchError(f"torch runs no MaxPool with Indices (node {node.proto.name!r})")
    data = x[0]
    rank = data.dim() - 2
    data, padding = _padded(node, data, rank, -math.inf)
    kernel = list(node.get("kernel_shape"))
    function = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[rank - 1]
    return [
        function(
            data,
            kernel,
            stride=list(node.get("strides", [1] * rank)),
            padding=padding,
            dilation=list(node.get("dilations", [1] * rank)),
            ceil_mode=bool(node.get("ceil_mode", 0)),
        )
    ]


def _average_pool(node, x):
    data = x[0]
    rank = data.dim() - 2
    begin, end = _pads(node, rank)
    if begin != end:
        raise OrtBenchError(
            f"torch runs no AveragePool with asymmetric pads (node {node.proto.name!r})"
        )
    if node.get("ceil_mode", 0) and node.get("count_include_pad", 0):
        # ONNX divides a window that overhangs the input by the whole kernel, torch by
        # the part inside the input and its pads
        raise OrtBenchError(
            f"torch runs no AveragePool with both ceil_mode and count_include_pad (node "
            f"{node.proto.name!r})"
        )
    function = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[rank - 1]
    return [
        function(
            data,
            list(node.get("kernel_shape")),
            stride=list(node.get("strides", [1] * rank)),
            padding=begin,
            ceil_mode=bool(node.get("ceil_mode", 0)),
            count_include_pad=bool(node.get("count_include_pad", 0)),
        )
    ]


def _batch_norm(node, x):
    if node.get("training_mode", 0):
        raise OrtBenchError(
            f"torch runs BatchNormalization with inference statistics only "
            f"(node {node.proto.name!r} has training_mode=1)"
        )
    data, scale, bias, mean, var = x[:5]
    # by the formula, not F.batch_norm: an export may compute the statistics from
    # trained tensors, and F.batch_norm has no gradient for them
    shape = (-1,) + (1,) * (data.dim() - 2)
    inverse = torch.rsqrt(var + node.get("epsilon", 1e-5)) * scale
    return [(data - mean.reshape(shape)) * inverse.reshape(shape) + bias.reshape(shape)]


def _layer_norm(node, x):
    data, scale = x[0], x[1]
    bias = x[2] if len(x) > 2 else None
    axis = node.get("axis", -1) % data.dim()
    dims = list(range(axis, data.dim()))
    mean = data.mean(dim=dims, keepdim=True)
    centered = data - mean
    inverse = torch.rsqrt(
        (centered * centered).mean(dim=dims, keepdim=True) + node.get("epsilon", 1e-5)
    )
    out = centered * inverse * scale
    if bias is not None:
        out = out + bias
    return [out, mean, inverse]


def _instance_norm(node, x):
    data, scale, bias = x
    dims = list(range(2, data.dim()))
    mean = data.mean(dim=dims, keepdim=True)
    centered = data - mean
    inverse = torch.rsqrt(
        (centered * centered).mean(dim=dims, keepdim=True) + node.get("epsilon", 1e-5)
    )
    shape = (-1,) + (1,) * (data.dim() - 2)
    return [centered * inverse * scale.reshape(shape) + bias.reshape(shape)]


def _gather(node, x):
    data, indices = x
    axis = node.get("axis", 0) % data.dim()
    indices = torch.where(indices < 0, indices + data.shape[axis], indices).long()
    picked = data.index_select(axis, indices.reshape(-1))
    return [picked.reshape((*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :]))]


def _transpose(node, x):
    data = x[0]
    perm = node.get("perm") or list(reversed(range(data.dim())))
    return [data.permute(*perm)]


def _split(node, x):
    data = x[0]
    axis = node.get("axis", 0) % data.dim()
    sizes = axis_argument(node, x, 1, "split")
    if sizes is None:
        parts = len(node.proto.output)
        size = -(-data.shape[axis] // parts)
        sizes = [size] * (parts - 1) + [data.shape[axis] - size * (parts - 1)]
    return list(torch.split(data, sizes, dim=axis))


def _slice_indices(start: int, end: int, step: int, size: int) -> range:
    """The indices Slice keeps on an axis of ``size``, as the ONNX spec clamps the bounds:
    a negative bound counts from the end, then going forwards both clamp into
    [0, size], going backwards the start into [0, size - 1] and the end into
    [-1, size - 1], -1 being before the axis (Python's slicing would drop a start before
    the axis instead)."""
    start += size if start < 0 else 0
    end += size if end < 0 else 0
    if step > 0:
        return range(min(max(start, 0), size), min(max(end, 0), size), step)
    return range(min(max(start, 0), size - 1), min(max(end, -1), size - 1), step)


def _slice(node, x):
    data = x[0]
    if node.opset < 10:
        starts, ends = list(node.get("starts")), list(node.get("ends"))
        axes, steps = node.get("axes"), None
    else:
        starts, ends = ints(x[1]), ints(x[2])
        axes = ints(x[3]) if len(x) > 3 and x[3] is not None else None
        steps = ints(x[4]) if len(x) > 4 and x[4] is not None else None
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = steps or [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= data.dim()
        kept = _slice_indices(start, end, step, data.shape[axis])
        if step == 1:  # a view
            data = data.narrow(axis, kept.start, len(kept))
        else:
            index = torch.tensor(list(kept), dtype=torch.long, device=data.device)
            data = data.index_select(axis, index)
    return [data]


def _squeeze(node, x):
    data = x[0]
    axes = axis_argument(node, x, 1)
    if axes is None:
        axes = [k for k, d in enumerate(data.shape) if d == 1]
    for axis in sorted((a % data.dim() for a in axes), reverse=True):
        data = data.squeeze(axis)
    return [data]


def _unsqueeze(node, x):
    data = x[0]
    axes = axis_argument(node, x, 1)
    rank = data.dim() + len(axes)
    for axis in sorted(a % rank for a in axes):
        data = data.unsqueeze(axis)
    return [data]


def _shape(node, x):
    shape = list(x[0].shape)
    start, end = node.get("start", 0), node.get("end", len(shape))
    return [torch.tensor(shape[start:end], dtype=torch.int64, device=x[0].device)]


def _constant(node, x):
    return [torch.from_numpy(constant_array(node))]


def _constant_of_shape(node, x):
    value = node.get("value")
    array = numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
    filled = torch.from_numpy(np.array(array)).reshape(()).to(x[0].device)
    return [filled.expand(ints(x[0])).clone()]


def _cast(node, x):
    to = node.get("to")
    if to not in _DTYPES:
        raise OrtBenchError(f"torch runs no Cast to type {to} (node {node.proto.name!r})")
    return [x[0].to(_DTYPES[to])]


def _expand(node, x):
    shape = torch.broadcast_shapes(tuple(x[0].shape), tuple(ints(x[1])))
    return [x[0].expand(shape)]


def _dropout(node, x):
    if len(x) > 2 and x[2] is not None and bool(x[2]):
        raise OrtBenchError(
            f"torch runs Dropout for inference only (node {node.proto.name!r} trains)"
        )
    return [x[0], torch.ones_like(x[0], dtype=torch.bool)]


def _clip(node, x):
    low = x[1] if len(x) > 1 and x[1] is not None else node.get("min")
    high = x[2] if len(x) > 2 and x[2] is not None else node.get("max")
    return [torch.clamp(x[0], low, high)]


def _arg_max(node, x):
    data, axis = x[0], node.get("axis", 0)
    keep = bool(node.get("keepdims", 1))
    if node.get("select_last_index", 0):  # the first of the flipped axis is the last
        last = torch.argmax(torch.flip(data, [axis]), dim=axis, keepdim=keep)
        return [data.shape[axis] - 1 - last]
    return [torch.argmax(data, dim=axis, keepdim=keep)]


def _pow(node, x):
    base, exponent = x
    return [torch.pow(base, exponent.to(base.dtype) if base.is_floating_point() else exponent)]


def _gelu(node, x):
    return [F.gelu(x[0], approximate=node.get("approximate", "none"))]


def _selu(node, x):
    alpha = node.get("alpha", 1.67326319217681884765625)
    return [F.elu(x[0], alpha) * node.get("gamma", 1.05070102214813232421875)]


def _hard_sigmoid(node, x):
    return [torch.clamp(x[0] * node.get("alpha", 0.2) + node.get("beta", 0.5), 0.0, 1.0)]


#: The ONNX operators (default domain) the runner executes.
OPS: dict[str, Op] = {
    "Abs": unary(torch.abs),
    "Add": binary(torch.add),
    "ArgMax": _arg_max,
    "AveragePool": _average_pool,
    "BatchNormalization": _batch_norm,
    "Cast": _cast,
    "CastLike": lambda node, x: [x[0].to(x[1].dtype)],
    "Celu": lambda node, x: [F.celu(x[0], node.get("alpha", 1.0))],
    "Clip": _clip,
    "Concat": lambda node, x: [torch.cat(x, dim=node.get("axis"))],
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    "Conv": _conv,
    "Div": _div,
    "Dropout": _dropout,
    "Equal": binary(torch.eq),
    "Elu": lambda node, x: [F.elu(x[0], node.get("alpha", 1.0))],
    "Erf": unary(torch.erf),
    "Exp": unary(torch.exp),
    "Expand": _expand,
    "Flatten": flatten,
    "Gather": _gather,
    "Gelu": _gelu,
    "Gemm": gemm,
    "GlobalAveragePool": lambda node, x: [x[0].mean(dim=list(range(2, x[0].dim())), keepdim=True)],
    "Greater": binary(torch.gt),
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": unary(F.hardswish),
    "Identity": lambda node, x: [x[0]],
    "InstanceNormalization": _instance_norm,
    "LayerNormalization": _layer_norm,
    "LeakyRelu": lambda node, x: [F.leaky_relu(x[0], node.get("alpha", 0.01))],
    "Less": binary(torch.lt),
    "Log": unary(torch.log),
    "LogSoftmax": softmax(torch.log_softmax, "dim"),
    "MatMul": binary(torch.matmul),
    "Max": variadic(torch.maximum),
    "MaxPool": _max_pool,
    "Min": variadic(torch.minimum),
    "Mish": unary(F.mish),
    "Mod": lambda node, x: [(torch.fmod if node.get("fmod", 0) else torch.remainder)(*x)],
    "Mul": binary(torch.mul),
    "Neg": unary(torch.neg),
    "Not": unary(torch.logical_not),
    "Pow": _pow,
    "PRelu": lambda node, x: [torch.where(x[0] >= 0, x[0], x[0] * x[1])],
    "Reciprocal": unary(torch.reciprocal),
    "ReduceMean": reduce(torch.mean, "dim", "keepdim"),
    "ReduceSum": reduce(torch.sum, "dim", "keepdim"),
    "Relu": unary(torch.relu),
    "Reshape": reshape,
    "Selu": _selu,
    "Shape": _shape,
    "Sigmoid": unary(torch.sigmoid),
    "Slice": _slice,
    "Softplus": unary(F.softplus),
    "Softmax": softmax(torch.softmax, "dim"),
    "Split": _split,
    "Sqrt": unary(torch.sqrt),
    "Squeeze": _squeeze,
    "Sub": binary(torch.sub),
    "Sum": variadic(torch.add),
    "Tanh": unary(torch.tanh),
    "Transpose": _transpose,
    "Unsqueeze": _unsqueeze,
    "Where": lambda node, x: [torch.where(x[0], x[1], x[2])],
}


def unsupported(model: onnx.ModelProto, outputs: Sequence[str]) -> str | None:
    """Why torch cannot run the nodes the outputs need, or None when it can
    (``torch runs no ONNX operator <op> (node <name>)`` for the first one it cannot run)."""
    return interpreter.unsupported(model, outputs, OPS, "torch")


class TorchGraph(torch.nn.Module):
    """An ONNX graph as a torch module: its nodes run as torch operations.

    Parameters
    ----------
    model : onnx.ModelProto
        The graph to run.
    outputs : sequence of str
        The tensors ``forward`` returns, in order.
    trained : sequence of str
        The initializers that become parameters (``parameter(name)``); the others are
        constants.
    device : str
        The torch device of the parameters and constants.

    Raises
    ------
    OrtBenchError
        When a node the outputs need is not an operator the runner executes.
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        outputs: Sequence[str],
        trained: Sequence[str] = (),
        device: str = "cpu",
    ):
        super().__init__()
        reason = unsupported(model, outputs)
        if reason:
            raise OrtBenchError(reason)
        graph = model.graph
        opset = interpreter.graph_opset(model)
        self.outputs = list(outputs)
        nodes = [Node(n, opset) for n in interpreter.needed_nodes(graph, outputs)]
        values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        for node in nodes:  # constants are computed once, on the device
            if node.proto.op_type == "Constant":
                values[node.proto.output[0]] = constant_array(node)
        self._nodes = [n for n in nodes if n.proto.op_type != "Constant"]
        self._trained = {name: k for k, name in enumerate(trained)}
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.from_numpy(np.array(values[name])).to(device))
            for name in trained
        )
        # every value a forward pass starts from, by name, made once
        self._values = {
            name: torch.from_numpy(np.array(value)).to(device)
            for name, value in values.items()
            if name not in self._trained
        }
        self._values.update((name, self.weights[k]) for name, k in self._trained.items())
        initializers = set(values)
        self.input_names = [i.name for i in graph.input if i.name not in initializers]

    def parameter(self, name: str) -> torch.nn.Parameter:
        """The parameter holding initializer ``name``."""
        return self.weights[self._trained[name]]

    def forward(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """The graph's outputs for its data inputs, given in the graph's order."""
        env = dict(self._values)
        env.update(zip(self.input_names, inputs))
        interpreter.run_nodes(self._nodes, OPS, env)
        return [env[name] for name in self.outputs]
