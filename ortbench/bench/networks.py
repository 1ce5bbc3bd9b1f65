"""The networks of the built-in problems beyond the MLP, written with ONNX operators.

Both read the 64 pixels of an 8x8 digit image as one row, as ortbench feeds data, and
output class probabilities (a Softmax over raw scores) and the predicted class:

- ``cnn``: two 3x3 convolutions (padding 1), each followed by ReLU and 2x2 max pooling,
  then a linear layer to the classes;
- ``transformer``: the image's 8 rows as 8 tokens of 8 pixels, a linear embedding plus a
  learnt position embedding, one encoder block (two-head self-attention, residual add,
  LayerNorm, a GELU feed-forward layer in its Erf form, residual add, LayerNorm), the mean
  over tokens, then a linear layer to the classes.

The graphs are built with :mod:`onnx.helper` (no torch needed); initial weights are drawn
from a seed, uniform in ``±1/sqrt(fan_in)`` as torch initialises its layers.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..training.graphs.builder import GraphBuilder

#: Side of the square images the networks read.
SIDE = 8
#: ai.onnx opset of the graphs (what torch.onnx.export writes by default).
OPSET = 17


class _Network:
    """A GraphBuilder with named, seeded weights."""

    def __init__(self, name: str, seed: int):
        self.b = GraphBuilder(name, opset=OPSET)
        self.rng = np.random.RandomState(seed)

    def tensor(self, name: str, value) -> str:
        self.b.initializers.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], fan_in: int) -> str:
        bound = 1 / math.sqrt(fan_in)
        return self.tensor(name, self.rng.uniform(-bound, bound, shape))

    def ints(self, values: list[int]) -> str:
        return self.b.const(values, dtype=np.int64)

    def linear(self, x: str, name: str, n_in: int, n_out: int) -> str:
        """x @ W + b over the last axis (any leading axes)."""
        w = self.weight(f"{name}.weight", (n_in, n_out), n_in)
        return self.b.op(
            "Add", self.b.op("MatMul", x, w), self.weight(f"{name}.bias", (n_out,), n_in)
        )

    def finish(self, scores: str, classes: int) -> onnx.ModelProto:
        b = self.b
        b.op("Softmax", scores, axis=-1, name="probabilities")
        b.op("ArgMax", scores, axis=1, keepdims=0, name="label")
        b.output("label", [None], TensorProto.INT64)
        b.output("probabilities", [None, classes])
        return b.to_model()


def cnn(classes: int, seed: int, channels: tuple[int, int] = (8, 16)) -> onnx.ModelProto:
    """The ``cnn`` problem's network, its weights drawn from ``seed``."""
    net = _Network("cnn", seed)
    b = net.b
    x = b.op("Reshape", b.input("X", [None, SIDE * SIDE]), net.ints([-1, 1, SIDE, SIDE]))
    side, previous = SIDE, 1
    for k, count in enumerate(channels, 1):
        fan_in = previous * 9
        w = net.weight(f"conv{k}.weight", (count, previous, 3, 3), fan_in)
        x = b.op("Conv", x, w, net.weight(f"conv{k}.bias", (count,), fan_in), pads=[1, 1, 1, 1])
        x = b.op("MaxPool", b.op("Relu", x), kernel_shape=[2, 2], strides=[2, 2])
        side, previous = side // 2, count
    flat = b.op("Flatten", x, axis=1)
    return net.finish(net.linear(flat, "out", previous * side * side, classes), classes)


def _layer_norm(net: _Network, x: str, name: str, width: int) -> str:
    scale = net.tensor(f"{name}.weight", np.ones(width))
    bias = net.tensor(f"{name}.bias", np.zeros(width))
    return net.b.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=1e-5)


def transformer(classes: int, seed: int, width: int = 16, heads: int = 2) -> onnx.ModelProto:
    """The ``transformer`` problem's network, its weights drawn from ``seed``."""
    net = _Network("transformer", seed)
    b = net.b
    head = width // heads
    tokens = b.op("Reshape", b.input("X", [None, SIDE * SIDE]), net.ints([-1, SIDE, SIDE]))
    t = net.linear(tokens, "embed", SIDE, width)
    t = b.op("Add", t, net.weight("position", (SIDE, width), width))

    def split_heads(x: str) -> str:  # (n, tokens, width) -> (n, heads, tokens, head)
        return b.op(
            "Transpose", b.op("Reshape", x, net.ints([0, 0, heads, head])), perm=[0, 2, 1, 3]
        )

    q, k, v = (split_heads(net.linear(t, f"attention.{p}", width, width)) for p in "qkv")
    logits = b.op(
        "Div", b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2])), b.const(math.sqrt(head))
    )
    mixed = b.op("MatMul", b.op("Softmax", logits, axis=-1), v)
    merged = b.op("Reshape", b.op("Transpose", mixed, perm=[0, 2, 1, 3]), net.ints([0, 0, width]))
    t = _layer_norm(
        net, b.op("Add", t, net.linear(merged, "attention.out", width, width)), "norm1", width
    )
    hidden = net.linear(t, "feed.up", width, 2 * width)
    erf = b.op("Erf", b.op("Div", hidden, b.const(math.sqrt(2))))
    gelu = b.op("Mul", b.op("Mul", hidden, b.op("Add", erf, b.const(1.0))), b.const(0.5))
    t = _layer_norm(
        net, b.op("Add", t, net.linear(gelu, "feed.down", 2 * width, width)), "norm2", width
    )
    pooled = b.op("ReduceMean", t, axes=[1], keepdims=0)
    return net.finish(net.linear(pooled, "out", width, classes), classes)


#: Built-in network problems: name -> builder(classes, seed).
NETWORKS = {"cnn": cnn, "transformer": transformer}
