"""Reverse-mode differentiation of ONNX graphs into standard ONNX operators only.

onnxruntime-training's gradient graphs use training-only kernels (ReluGrad, FusedMatMul,
BroadcastGradientArgs, YieldOp...), so they run on its 1.19.2 build alone. The graphs built
here use the default ONNX domain only and run on any onnxruntime build, CUDA included.

:func:`vjp_graph` appends, after a model's nodes, the vector-Jacobian product of its float
outputs: given ``<y>_grad`` for each output y, it computes ``<x>_grad`` for the requested
inputs and initializers. :func:`split_forward_backward` cuts that graph in two, the
forward pass handing the backward pass the intermediate values it needs. Each operator's
rule is a small function of :data:`RULES`, one module per operator family in
:mod:`ortbench.training.gradients.portable_rules`; an operator without one stops with an error naming
it and the node. RNN, LSTM and GRU nodes are replaced by their unrolled form
(:mod:`ortbench.training.graphs.recurrent`) before differentiation: the forward pass runs
the same equations step by step, and the gradient nodes read its values.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import NoGradientError, OrtBenchError
from ..graphs.builder import GraphBuilder
from ..graphs.nodes import refuse_training_forms
from ..graphs.recurrent import unroll_recurrent
from ..graphs.shapes import inferred_shapes
from ..graphs.weights import FLOAT_TYPES
from .portable_rules import RULES, RuleContext

__all__ = ["RULES", "split_forward_backward", "vjp_graph"]


def vjp_graph(
    model: onnx.ModelProto,
    wrt: list[str],
    fill_grad: bool = False,
    seeds: dict[str, str] | None = None,
) -> onnx.ModelProto:
    """The model plus the gradients of its float outputs with respect to ``wrt``.

    Inputs: the model's, then ``<y>_grad`` for each float output ``y`` (not with
    ``fill_grad``, which takes ones), or the name ``seeds[y]`` gives. Outputs: ``<x>_grad``
    for each name of ``wrt``, then the model's own outputs. The nodes are those of
    ``unroll_recurrent(model)`` (the model's own when it has no RNN, LSTM or GRU node), then the
    gradient's.
    """
    model = unroll_recurrent(model)
    if _opset(model) < 13:
        raise OrtBenchError(
            f"portable gradients need ai.onnx opset >= 13, the model has {_opset(model)}"
        )
    shapes, types = inferred_shapes(model)
    graph = model.graph
    outputs = [o.name for o in graph.output if types.get(o.name) in FLOAT_TYPES]
    b = GraphBuilder("vjp", opset=_opset(model), prefix="vjp_")
    nodes = list(graph.node)
    between, needed = _between(nodes, set(wrt), set(outputs), types)
    refuse_training_forms(nodes, "portable")
    ctx = RuleContext(b, shapes, needed)
    grads: dict[str, list[str]] = {}
    for name in outputs:
        if fill_grad:
            ones = numpy_helper.from_array(np.ones(1, np.float32))
            grads[name] = [b.op("ConstantOfShape", b.op("Shape", name), value=ones)]
        else:
            seed = (seeds or {}).get(name, f"{name}_grad")
            grads[name] = [b.input(seed, shapes.get(name))]
    _backpropagate(ctx, [nodes[k] for k in sorted(between)], grads)
    made = {o for node in b.nodes for o in node.output}
    for name in wrt:
        total = _total(b, grads.get(name))
        if total is None:
            raise OrtBenchError(f"portable gradient: {name!r} does not reach any output")
        if total in made:  # a value of the gradient nodes: give it the output's name
            made.discard(total)
            b.rename(total, f"{name}_grad")
        else:  # an input, or a value already output under another name
            b.op("Identity", total, name=f"{name}_grad")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    result.graph.input.extend(b.inputs)
    result.graph.initializer.extend(b.initializers)
    result.graph.node.extend(b.nodes)
    own = list(result.graph.output)
    del result.graph.output[:]
    result.graph.output.extend(
        helper.make_tensor_value_info(f"{name}_grad", TensorProto.FLOAT, shapes.get(name))
        for name in wrt
    )
    result.graph.output.extend(own)
    return result


def split_forward_backward(
    model: onnx.ModelProto, wrt: list[str]
) -> tuple[onnx.ModelProto, onnx.ModelProto, list[str]]:
    """The forward and gradient graphs of :func:`vjp_graph`, split so nothing runs twice.

    Returns ``(forward, backward, stash)``. ``forward`` is the model, which also outputs
    ``stash``: the intermediate values the gradient nodes read (activations, matrix
    product inputs...). ``backward`` holds the gradient nodes alone. Its inputs: the
    stash, the model's inputs it reads (weights, X), and ``<y>_grad`` for each float
    output ``y``; its outputs: ``<x>_grad`` for each name of ``wrt``.
    """
    model = unroll_recurrent(model)  # the forward nodes vjp_graph writes first
    full = vjp_graph(model, wrt)
    graph, count = full.graph, len(model.graph.node)
    forward_nodes, backward_nodes = graph.node[:count], graph.node[count:]
    made = {o for node in backward_nodes for o in node.output}
    needed = list(
        dict.fromkeys(i for node in backward_nodes for i in node.input if i and i not in made)
    )
    forward_made = {o for node in forward_nodes for o in node.output}
    stash = [name for name in needed if name in forward_made]
    shapes, types = inferred_shapes(model)

    def info(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(
            name, types.get(name, TensorProto.FLOAT), shapes.get(name)
        )

    forward = onnx.ModelProto()
    forward.CopyFrom(model)
    own = {o.name for o in forward.graph.output}
    forward.graph.output.extend(info(name) for name in stash if name not in own)
    inputs = {i.name: i for i in graph.input}
    initializers = [i for i in graph.initializer if i.name in needed]
    backward_graph = helper.make_graph(
        list(backward_nodes),
        "backward",
        [inputs[n] for n in needed if n in inputs] + [info(n) for n in stash],
        list(graph.output[: len(wrt)]),
        initializers,
    )
    backward = helper.make_model(backward_graph, opset_imports=list(model.opset_import))
    backward.ir_version = model.ir_version
    return forward, backward, stash


def _backpropagate(ctx: RuleContext, nodes: list, grads: dict[str, list[str]]) -> None:
    """Add to ``grads`` the contributions of ``nodes`` (in graph order), last node first."""
    for node in reversed(nodes):
        upstream = [_total(ctx.b, grads.get(o)) for o in node.output]
        if all(u is None for u in upstream):
            continue
        if node.op_type in RULES and node.domain in ("", "ai.onnx"):
            inputs = RULES[node.op_type](ctx, node, upstream)
        else:
            raise NoGradientError(
                f"no portable gradient for operator {node.op_type!r} (node {node.name!r})",
                node.op_type,
                node.name,
            )
        for name, grad in zip(node.input, inputs):
            if grad is not None and ctx.needs(name):
                grads.setdefault(name, []).append(grad)


def _total(b: GraphBuilder, parts: list[str] | None) -> str | None:
    """One gradient from several contributions (summed once, then cached)."""
    if not parts:
        return None
    if len(parts) > 1:
        parts[:] = [b.add_all(list(parts))]
    return parts[0]


def _between(
    nodes: list, sources: set[str], sinks: set[str], types: dict[str, int]
) -> tuple[set[int], set[str]]:
    """Positions of the nodes on a path of float values from a source to a sink, and the
    values on those paths (those whose gradient is needed)."""
    reach_forward, forward = set(sources), set()
    for k, node in enumerate(nodes):
        if reach_forward.intersection(node.input):
            made = [o for o in node.output if types.get(o) in FLOAT_TYPES]
            if made:
                forward.add(k)
                reach_forward.update(made)
    reach_back, both = set(sinks), set()
    for k in reversed(range(len(nodes))):
        if k in forward and reach_back.intersection(nodes[k].output):
            both.add(k)
            reach_back.update(nodes[k].input)
    return both, reach_forward & reach_back


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 21)
