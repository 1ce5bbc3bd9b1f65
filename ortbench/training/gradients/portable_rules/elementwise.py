"""Rules of the elementwise operators: arithmetic, activations, selections."""

from __future__ import annotations

import math

from ...graphs.nodes import node_attributes
from ..kernel_forms import is_large, masked_gradient, relu_side_gradient
from .registry import rule


@rule("Identity")
def _identity(ctx, node, g):
    return [g[0]]


@rule("Cast")
def _cast(ctx, node, g):
    return [g[0]]  # float to float only: non-float inputs get no gradient anyway


@rule("CastLike")
def _cast_like(ctx, node, g):
    return [g[0], None]  # the second input gives the type only


@rule("Dropout")
def _dropout(ctx, node, g):
    return [g[0], None]


@rule("Add")
def _add(ctx, node, g):
    y = node.output[0]
    return [ctx.unbroadcast(g[0], x, y) if ctx.needs(x) else None for x in node.input]


@rule("Sub")
def _sub(ctx, node, g):
    a, b = node.input
    negated = ctx.b.op("Neg", g[0]) if ctx.needs(b) else None
    return [
        ctx.unbroadcast(g[0], a, node.output[0]),
        negated and ctx.unbroadcast(negated, b, node.output[0]),
    ]


@rule("Mul")
def _mul(ctx, node, g):
    a, b = node.input
    y = node.output[0]
    return [
        ctx.unbroadcast(ctx.b.op("Mul", g[0], b), a, y) if ctx.needs(a) else None,
        ctx.unbroadcast(ctx.b.op("Mul", g[0], a), b, y) if ctx.needs(b) else None,
    ]


@rule("Div")
def _div(ctx, node, g):
    a, b = node.input
    y = node.output[0]
    ga = ctx.b.op("Div", g[0], b)
    if not ctx.needs(b):
        return [ctx.unbroadcast(ga, a, y), None]
    gb = ctx.b.op("Neg", ctx.b.op("Mul", ga, y))  # -g * a / b^2 = -(g / b) * y
    return [ctx.unbroadcast(ga, a, y), ctx.unbroadcast(gb, b, y)]


@rule("Neg")
def _neg(ctx, node, g):
    return [ctx.b.op("Neg", g[0])]


@rule("Relu")
def _relu(ctx, node, g):
    # the mask reads the output, positive where the input is: the input then has the Relu
    # as its only reader, and onnxruntime can fuse the Gemm or Conv before it with it
    out = node.output[0]
    if is_large(ctx.shapes.get(out)):
        return [masked_gradient(ctx.b, out, g[0])]
    return [relu_side_gradient(ctx.b, out, g[0])]


@rule("LeakyRelu")
def _leaky_relu(ctx, node, g):
    alpha = node_attributes(node).get("alpha", 0.01)
    positive = ctx.b.op("Greater", node.input[0], ctx.b.const(0.0))
    return [ctx.b.op("Where", positive, g[0], ctx.b.op("Mul", g[0], ctx.b.const(alpha)))]


@rule("Elu")
def _elu(ctx, node, g):
    # y = x for x > 0, alpha (exp(x) - 1) else: the slope is 1, or y + alpha
    alpha = node_attributes(node).get("alpha", 1.0)
    positive = ctx.b.op("Greater", node.input[0], ctx.b.const(0.0))
    slope = ctx.b.op("Add", node.output[0], ctx.b.const(alpha))
    return [ctx.b.op("Where", positive, g[0], ctx.b.op("Mul", g[0], slope))]


@rule("Softplus")
def _softplus(ctx, node, g):
    # d/dx log(1 + exp(x)) = sigmoid(x)
    return [ctx.b.op("Mul", g[0], ctx.b.op("Sigmoid", node.input[0]))]


@rule("Selu")
def _selu(ctx, node, g):
    # y = gamma x for x > 0, gamma alpha (exp(x) - 1) else: the slope is gamma, or
    # y + gamma alpha
    attrs = node_attributes(node)
    alpha = attrs.get("alpha", 1.67326319217681884765625)
    gamma = attrs.get("gamma", 1.05070102214813232421875)
    positive = ctx.b.op("Greater", node.input[0], ctx.b.const(0.0))
    slope = ctx.b.op("Add", node.output[0], ctx.b.const(gamma * alpha))
    return [
        ctx.b.op(
            "Where",
            positive,
            ctx.b.op("Mul", g[0], ctx.b.const(gamma)),
            ctx.b.op("Mul", g[0], slope),
        )
    ]


@rule("Celu")
def _celu(ctx, node, g):
    # y = x for x > 0, alpha (exp(x / alpha) - 1) else: the slope is 1, or y / alpha + 1
    alpha = node_attributes(node).get("alpha", 1.0)
    positive = ctx.b.op("Greater", node.input[0], ctx.b.const(0.0))
    slope = ctx.b.op(
        "Add", ctx.b.op("Mul", node.output[0], ctx.b.const(1.0 / alpha)), ctx.b.const(1.0)
    )
    return [ctx.b.op("Where", positive, g[0], ctx.b.op("Mul", g[0], slope))]


@rule("HardSigmoid")
def _hard_sigmoid(ctx, node, g):
    # y = max(0, min(1, alpha x + beta)): the slope is alpha where y is strictly inside
    y = node.output[0]
    alpha = node_attributes(node).get("alpha", 0.2)
    inside = ctx.b.op(
        "And",
        ctx.b.op("Greater", y, ctx.b.const(0.0)),
        ctx.b.op("Less", y, ctx.b.const(1.0)),
    )
    return [ctx.where_else_zero(inside, ctx.b.op("Mul", g[0], ctx.b.const(alpha)))]


@rule("HardSwish")
def _hard_swish(ctx, node, g):
    # y = x max(0, min(1, x / 6 + 1/2)): the slope is 0 below -3, 1 above 3, x / 3 + 1/2
    # between
    x = node.input[0]
    b = ctx.b
    between = b.op("Add", b.op("Mul", x, b.const(1.0 / 3.0)), b.const(0.5))
    above = b.op("Where", b.op("Greater", x, b.const(3.0)), b.const(1.0), between)
    slope = b.op("Where", b.op("Less", x, b.const(-3.0)), b.const(0.0), above)
    return [b.op("Mul", g[0], slope)]


@rule("Mish")
def _mish(ctx, node, g):
    # y = x t, t = tanh(softplus(x)): dy/dx = t + x (1 - t^2) sigmoid(x)
    x = node.input[0]
    b = ctx.b
    t = b.op("Tanh", b.op("Softplus", x))
    dt = b.op("Mul", b.op("Sub", b.const(1.0), b.op("Mul", t, t)), b.op("Sigmoid", x))
    return [b.op("Mul", g[0], b.op("Add", t, b.op("Mul", x, dt)))]


@rule("PRelu")
def _prelu(ctx, node, g):
    # y = x for x >= 0, slope x else; the slope broadcasts to x (one, or one per channel)
    x, slope = node.input
    y = node.output[0]
    positive = ctx.b.op("Greater", x, ctx.b.const(0.0))
    gx = gs = None
    if ctx.needs(x):
        gx = ctx.b.op("Where", positive, g[0], ctx.b.op("Mul", g[0], slope))
    if ctx.needs(slope):  # dy/dslope = x where x < 0, summed where the slope broadcasts
        negative_side = ctx.where_else_zero(positive, ctx.b.op("Mul", g[0], x), False)
        gs = ctx.unbroadcast(negative_side, slope, y)
    return [gx, gs]


@rule("Sigmoid")
def _sigmoid(ctx, node, g):
    y = node.output[0]
    slope = ctx.b.op("Mul", y, ctx.b.op("Sub", ctx.b.const(1.0), y))
    return [ctx.b.op("Mul", g[0], slope)]


@rule("Tanh")
def _tanh(ctx, node, g):
    y = node.output[0]
    slope = ctx.b.op("Sub", ctx.b.const(1.0), ctx.b.op("Mul", y, y))
    return [ctx.b.op("Mul", g[0], slope)]


@rule("Erf")
def _erf(ctx, node, g):
    # d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2)
    x = node.input[0]
    bump = ctx.b.op("Exp", ctx.b.op("Neg", ctx.b.op("Mul", x, x)))
    return [ctx.b.op("Mul", g[0], ctx.b.op("Mul", bump, ctx.b.const(2.0 / math.sqrt(math.pi))))]


@rule("Gelu")
def _gelu(ctx, node, g):
    # Gelu (opset 20, torch's exporter from opset 20 on) in both forms, from its input
    x = node.input[0]
    b = ctx.b
    if node_attributes(node).get("approximate", b"none") == b"tanh":
        # y = x (1 + t) / 2 with t = tanh(c (x + k x^3)):
        # dy/dx = (1 + t) / 2 + x (1 - t^2) c (1 + 3 k x^2) / 2
        c, k = math.sqrt(2.0 / math.pi), 0.044715
        square = b.op("Mul", x, x)
        inner = b.op(
            "Mul", b.op("Add", x, b.op("Mul", b.op("Mul", square, x), b.const(k))), b.const(c)
        )
        t = b.op("Tanh", inner)
        half = b.op("Mul", b.op("Add", b.const(1.0), t), b.const(0.5))
        du = b.op("Mul", b.op("Add", b.const(1.0), b.op("Mul", square, b.const(3 * k))), b.const(c))
        dt = b.op("Sub", b.const(1.0), b.op("Mul", t, t))
        slope = b.op("Add", half, b.op("Mul", b.op("Mul", x, b.const(0.5)), b.op("Mul", dt, du)))
        return [b.op("Mul", g[0], slope)]
    # y = x Phi(x): dy/dx = Phi(x) + x phi(x), Phi and phi the normal law's cdf and density
    cdf = b.op(
        "Mul",
        b.op("Add", b.const(1.0), b.op("Erf", b.op("Mul", x, b.const(math.sqrt(0.5))))),
        b.const(0.5),
    )
    density = b.op(
        "Mul",
        b.op("Exp", b.op("Mul", b.op("Mul", x, x), b.const(-0.5))),
        b.const(1 / math.sqrt(2 * math.pi)),
    )
    return [b.op("Mul", g[0], b.op("Add", cdf, b.op("Mul", x, density)))]


@rule("Exp")
def _exp(ctx, node, g):
    return [ctx.b.op("Mul", g[0], node.output[0])]


@rule("Reciprocal")
def _reciprocal(ctx, node, g):
    # d/dx 1/x = -1/x^2 = -y^2
    y = node.output[0]
    return [ctx.b.op("Neg", ctx.b.op("Mul", g[0], ctx.b.op("Mul", y, y)))]


@rule("Log")
def _log(ctx, node, g):
    return [ctx.b.op("Div", g[0], node.input[0])]


@rule("Sign", "Floor", "Ceil", "Round")
def _piecewise_constant(ctx, node, g):
    """Zero almost everywhere, as torch's autograd has it (a tensor of zeros, so that a
    value read through these alone still gets a gradient)."""
    return [ctx.b.op("Mul", g[0], ctx.b.const(0.0))]


@rule("Abs")
def _abs(ctx, node, g):
    return [ctx.b.op("Mul", g[0], ctx.b.op("Sign", node.input[0]))]


@rule("Sqrt")
def _sqrt(ctx, node, g):
    return [ctx.b.op("Div", g[0], ctx.b.op("Mul", node.output[0], ctx.b.const(2.0)))]


@rule("Pow")
def _pow(ctx, node, g):
    x, p = node.input
    y = node.output[0]
    gx = gp = None
    if ctx.needs(x):  # d/dx x^p = p * x^(p-1)
        lowered = ctx.b.op("Pow", x, ctx.b.op("Sub", p, ctx.b.const(1.0)))
        gx = ctx.unbroadcast(ctx.b.op("Mul", g[0], ctx.b.op("Mul", p, lowered)), x, y)
    if ctx.needs(p):  # d/dp x^p = y * log(x)
        gp = ctx.b.op("Mul", g[0], ctx.b.op("Mul", y, ctx.b.op("Log", x)))
        gp = ctx.unbroadcast(gp, p, y)
    return [gx, gp]


@rule("Clip")
def _clip(ctx, node, g):
    x = node.input[0]
    keep = None
    for position, op in ((1, "GreaterOrEqual"), (2, "LessOrEqual")):
        if len(node.input) > position and node.input[position]:
            inside = ctx.b.op(op, x, node.input[position])
            keep = inside if keep is None else ctx.b.op("And", keep, inside)
    return [g[0] if keep is None else ctx.where_else_zero(keep, g[0])]


@rule("Where")
def _where(ctx, node, g):
    condition, a, b = node.input
    y = node.output[0]
    return [
        None,
        ctx.unbroadcast(ctx.where_else_zero(condition, g[0]), a, y) if ctx.needs(a) else None,
        ctx.unbroadcast(ctx.where_else_zero(condition, g[0], False), b, y)
        if ctx.needs(b)
        else None,
    ]
