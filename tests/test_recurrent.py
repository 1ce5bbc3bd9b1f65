"""RNN, LSTM and GRU nodes unrolled into standard operators (``graphs/recurrent.py``).

The unrolled graph against onnxruntime's own kernels on graphs built with onnx.helper,
for each attribute combination supported; torch's nn.RNN, nn.LSTM and nn.GRU exported at opsets
17 and 18 against torch autograd (the portable backend's gradients) and torch's own SGD
(the contenders' trajectories); and the one-line refusals.
"""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper

from ortbench.training import OrtBenchError, onnx_derivative
from ortbench.training.gradients.portable import RULES, split_forward_backward
from ortbench.training.graphs.recurrent import unroll_recurrent
from ortbench.training.runtime.build import runtime_problem

STEPS, BATCH, FEATURES, HIDDEN = 3, 2, 4, 5


def recurrent_model(
    op_type: str,
    direction: str = "forward",
    layout: int = 0,
    bias: bool = True,
    initial: bool = False,
    linear_before_reset: int = 0,
    steps: int | str = STEPS,
    seed: int = 0,
    **attributes,
) -> onnx.ModelProto:
    """One RNN, LSTM or GRU node over X, its weights (and biases, initial states)
    initializers drawn at random, every output a graph output."""
    rng = np.random.default_rng(seed)
    gates = {"RNN": 1, "LSTM": 4, "GRU": 3}[op_type]
    count = 2 if direction == "bidirectional" else 1

    def tensor(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    initializers = [
        tensor("W", count, gates * HIDDEN, FEATURES),
        tensor("R", count, gates * HIDDEN, HIDDEN),
    ]
    inputs = ["X", "W", "R", "B" if bias else "", "", "h0" if initial else ""]
    if bias:
        initializers.append(tensor("B", count, 2 * gates * HIDDEN))
    state = (BATCH, count, HIDDEN) if layout else (count, BATCH, HIDDEN)
    if initial:
        initializers.append(tensor("h0", *state))
        if op_type == "LSTM":
            inputs.append("c0")
            initializers.append(tensor("c0", *state))
    outputs = ["Y", "Y_h", "Y_c"][: 3 if op_type == "LSTM" else 2]
    if op_type == "GRU":
        attributes["linear_before_reset"] = linear_before_reset
    node = helper.make_node(
        op_type,
        inputs,
        outputs,
        name="recurrent",
        direction=direction,
        hidden_size=HIDDEN,
        layout=layout,
        **attributes,
    )
    x_shape = [BATCH, steps, FEATURES] if layout else [steps, BATCH, FEATURES]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def sequence_first(model: onnx.ModelProto) -> onnx.ModelProto:
    """A ``layout=1`` model as onnxruntime runs it (its kernels refuse layout 1): the node
    with layout 0 between Transpose nodes, the same outputs by the spec."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    node = result.graph.node[0]
    next(a for a in node.attribute if a.name == "layout").i = 0
    before = [helper.make_node("Transpose", ["X"], ["X_t"], perm=[1, 0, 2])]
    node.input[0] = "X_t"
    for k in (5, 6):  # initial_h, initial_c
        if len(node.input) > k and node.input[k]:
            name = node.input[k]
            before.append(helper.make_node("Transpose", [name], [f"{name}_t"], perm=[1, 0, 2]))
            node.input[k] = f"{name}_t"
    after = []
    for k, name in enumerate(list(node.output)):
        node.output[k] = f"{name}_t"
        perm = [2, 0, 1, 3] if k == 0 else [1, 0, 2]
        after.append(helper.make_node("Transpose", [f"{name}_t"], [name], perm=perm))
    del result.graph.node[:]
    result.graph.node.extend([*before, node, *after])
    return result


def run(model: onnx.ModelProto, feeds: dict, optimized: bool = True) -> list[np.ndarray]:
    options = onnxruntime.SessionOptions()
    if not optimized:  # onnxruntime's fused kernels read float only
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


COMBINATIONS = [
    combination
    for combination in itertools.product(
        ["RNN", "LSTM", "GRU"],
        ["forward", "reverse", "bidirectional"],
        [0, 1],
        [True, False],
        [True, False],
        [0, 1],
    )
    if combination[0] == "GRU" or combination[5] == 0  # linear_before_reset: GRU's
]


@pytest.mark.parametrize(
    ("op_type", "direction", "layout", "bias", "initial", "linear_before_reset"), COMBINATIONS
)
def test_unrolled_graph_equals_onnxruntime_kernels(
    op_type, direction, layout, bias, initial, linear_before_reset
):
    """Y, Y_h (and Y_c) of the unrolled graph, to 1e-5, from standard operators only."""
    model = recurrent_model(op_type, direction, layout, bias, initial, linear_before_reset)
    X = _x(model)
    expected = run(sequence_first(model) if layout else model, {"X": X})
    unrolled = unroll_recurrent(model)
    assert {n.op_type for n in unrolled.graph.node} <= set(RULES)
    got = run(unrolled, {"X": X})
    for name, value, want in zip(["Y", "Y_h", "Y_c"], got, expected):
        assert value.shape == want.shape, name
        np.testing.assert_allclose(value, want, atol=1e-5, err_msg=name)


def _x(model: onnx.ModelProto, seed: int = 1) -> np.ndarray:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op_type", ["RNN", "LSTM", "GRU"])
def test_one_step_and_only_the_last_state_read(op_type):
    """A sequence of one step; a graph reading Y_h alone gets no node for Y."""
    model = recurrent_model(op_type, "bidirectional", steps=1, initial=True)
    X = _x(model)
    for value, want in zip(run(unroll_recurrent(model), {"X": X}), run(model, {"X": X})):
        np.testing.assert_allclose(value, want, atol=1e-5)
    del model.graph.output[0]
    del model.graph.output[1:]
    unrolled = unroll_recurrent(model)
    assert "Y" not in {o for n in unrolled.graph.node for o in n.output}
    np.testing.assert_allclose(run(unrolled, {"X": X})[0], run(model, {"X": X})[0], atol=1e-5)


@pytest.mark.parametrize("op_type", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_portable_gradients_of_helper_graphs_equal_finite_differences(op_type, direction):
    """The gradient of every input (X, W, R, B, initial states) of the node itself,
    against central differences in float64 of the unrolled graph's sum of outputs
    (onnxruntime's kernels read float only; the test above checks that graph)."""
    model = recurrent_model(op_type, direction, initial=True, linear_before_reset=1)
    names = [i.name for i in model.graph.initializer]
    grad = onnx_derivative(model, weights=names, backend="portable", fill_grad=True)
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    X = _x(model)
    got = dict(zip([o.name for o in grad.graph.output], run(grad, {"X": X, **weights})))

    unrolled = unroll_recurrent(model)
    double = _as_double(unrolled)

    def total(values):
        feeds = {k: v.astype(np.float64) for k, v in values.items()}
        return sum(float(o.sum()) for o in run(double, feeds, optimized=False))

    eps, rng = 1e-5, np.random.default_rng(2)
    for name in ["X", *names]:  # 12 elements of each (or all), drawn at random
        values = {"X": X, **weights}
        base = values[name].astype(np.float64)
        for flat in rng.choice(base.size, min(12, base.size), replace=False):
            index = np.unravel_index(flat, base.shape)
            plus, minus = base.copy(), base.copy()
            plus[index] += eps
            minus[index] -= eps
            expected = (total({**values, name: plus}) - total({**values, name: minus})) / (2 * eps)
            np.testing.assert_allclose(
                got[f"{name}_grad"][index], expected, rtol=1e-4, atol=1e-6, err_msg=name
            )


def _as_double(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with float64 inputs and initializers (and hence values), for finite
    differences; its int64 constants are kept."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    floats = [i.name for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT]
    kept = [i for i in graph.initializer if i.name not in floats]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.DOUBLE, None) for n in floats]
    graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    graph.input.extend(inputs)
    for output in graph.output:
        output.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    return result


# torch networks exported by the TorchScript exporter -------------------------------------

torch = pytest.importorskip("torch")
from test_torch_peer import torch_sgd_losses  # noqa: E402
from torch_modules import RECURRENT, export, network  # noqa: E402

#: Where torch's gate blocks go in ONNX's order (LSTM: i f g o -> i o f c; GRU: r z n ->
#: z r h).
TORCH_GATES = {"RNN": [0], "LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2]}


def onnx_layout(module, model: onnx.ModelProto, values) -> dict[str, np.ndarray]:
    """The recurrent layers' W, R and B initializers of the export as they follow from
    torch tensors (``values(parameter name)``: the parameters or their gradients), by
    initializer name; the head's Linear layer keeps torch's names and layout."""
    rnn = module.rnn
    kind = type(rnn).__name__
    nodes = [n for n in model.graph.node if n.op_type == kind]
    assert len(nodes) == rnn.num_layers

    def gates(name):
        blocks = np.split(values(f"rnn.{name}"), len(TORCH_GATES[kind]))
        return np.concatenate([blocks[k] for k in TORCH_GATES[kind]])

    layouts = {name: values(name) for name in ("out.weight", "out.bias")}
    for layer, node in enumerate(nodes):
        directions = [f"l{layer}", f"l{layer}_reverse"][: 2 if rnn.bidirectional else 1]
        layouts[node.input[1]] = np.stack([gates(f"weight_ih_{d}") for d in directions])
        layouts[node.input[2]] = np.stack([gates(f"weight_hh_{d}") for d in directions])
        layouts[node.input[3]] = np.stack(
            [np.concatenate([gates(f"bias_ih_{d}"), gates(f"bias_hh_{d}")]) for d in directions]
        )
    return layouts


def torch_values(module):
    parameters = dict(module.named_parameters())
    return lambda name: parameters[name].detach().numpy()


def torch_grads(module):
    parameters = dict(module.named_parameters())
    return lambda name: parameters[name].grad.numpy()


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("name", list(RECURRENT))
def test_portable_gradients_equal_torch_autograd(name, opset):
    module = network(name)
    model = export(module, RECURRENT[name][1], opset)
    layouts = onnx_layout(module, model, torch_values(module))
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for onnx_name, value in layouts.items():  # the layouts read the export right
        np.testing.assert_array_equal(weights[onnx_name], value, err_msg=onnx_name)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, RECURRENT[name][1])).astype(np.float32)
    upstream = rng.standard_normal((5, 3)).astype(np.float32)
    x = torch.tensor(X, requires_grad=True)
    module.zero_grad()
    module(x).backward(torch.tensor(upstream))

    grad = onnx_derivative(model, weights=list(layouts), backend="portable")
    assert type(module.rnn).__name__ not in {n.op_type for n in grad.graph.node}  # unrolled
    feeds = {"X": X, "Y_grad": upstream, **{n: weights[n] for n in layouts}}
    got = dict(zip([o.name for o in grad.graph.output], run(grad, feeds)))
    np.testing.assert_allclose(got["X_grad"], x.grad.numpy(), rtol=1e-4, atol=1e-5)
    for onnx_name, want in onnx_layout(module, model, torch_grads(module)).items():
        np.testing.assert_allclose(
            got[f"{onnx_name}_grad"], want, rtol=1e-4, atol=1e-5, err_msg=onnx_name
        )


def test_the_portable_forward_pass_runs_the_equations_once():
    """The forward graph runs the unrolled equations and hands their values to the backward
    graph, which computes none of them again (no gate's Sigmoid or Tanh there)."""
    model = export(network("lstm, 2 layers, bidirectional"), 64)
    weights = [i.name for i in model.graph.initializer]
    from ortbench.training.graphs.weights import weights_as_inputs

    forward, backward, stash = split_forward_backward(weights_as_inputs(model, weights), weights)
    forward_ops = [n.op_type for n in forward.graph.node]
    assert "LSTM" not in forward_ops
    assert forward_ops.count("Sigmoid") >= 2 * 2 * 8  # layers x directions x time steps
    assert not {"LSTM", "Sigmoid", "Tanh"} & {n.op_type for n in backward.graph.node}
    assert stash


def recurrent_problem(folder, name: str):
    """The network exported with a dynamic batch and 3-class digits, as a user brings them."""
    from sklearn.datasets import load_digits

    from ortbench.bench.user_model import UserFiles, load_user_problem

    X, y = load_digits(return_X_y=True)
    onnx.save(export(network(name), 64), folder / "net.onnx")
    np.savez(folder / "digits.npz", X=(X[:160] / 16).astype(np.float32), y=y[:160] % 3)
    return load_user_problem(
        UserFiles(str(folder / "net.onnx"), (str(folder / "digits.npz"),), loss="log")
    )


@pytest.mark.parametrize("name", list(RECURRENT))
def test_contenders_follow_torch_s_own_sgd(tmp_path, name):
    """Three epochs of the portable contenders, the torch peer, JAX's where jax is
    installed and the training build's where it is (on the unrolled form too, since its
    own kernels run one direction only): torch's own trajectory."""
    from ortbench.bench.contenders import make_contender

    problem = recurrent_problem(tmp_path, name)
    expected = torch_sgd_losses(network(name).train(), problem, 3, 16)
    names = ["ort-portable-full", "ort-portable-fwbw", "ort-portable-loop", "torch-sgd"]
    if importlib.util.find_spec("jax") is not None:
        names.append("jax-sgd")
    if runtime_problem() is None:
        names += ["ort-full", "ort-fwbw"]
    for contender_name in names:
        contender = make_contender(contender_name, problem, 16, shuffle=False).fit(3)
        np.testing.assert_allclose(
            contender.loss_curve_, expected, rtol=1e-5, err_msg=contender_name
        )
    assert expected[-1] < expected[0]


# refusals ----------------------------------------------------------------------------------

REFUSED = {
    "clip": (
        dict(clip=3.0),
        "LSTM node 'recurrent' uses clip=3.0, which ortbench does not unroll",
    ),
    "activations": (
        dict(activations=["Sigmoid", "Relu", "Tanh"]),
        "LSTM node 'recurrent' uses activations=['Sigmoid', 'Relu', 'Tanh'], which",
    ),
    "activation_alpha": (
        dict(activation_alpha=[0.5]),
        "LSTM node 'recurrent' uses activation_alpha=[0.5], which",
    ),
    "input_forget": (dict(input_forget=1), "LSTM node 'recurrent' uses input_forget=1, which"),
}


def _refusal(model) -> str:
    with pytest.raises(OrtBenchError) as raised:
        unroll_recurrent(model)
    message = str(raised.value)
    assert "\n" not in message
    with pytest.raises(OrtBenchError) as again:
        onnx_derivative(model, backend="portable")
    assert str(again.value) == message
    return message


@pytest.mark.parametrize("what", list(REFUSED))
def test_attributes_not_unrolled_are_refused_in_one_line(what):
    attributes, start = REFUSED[what]
    assert _refusal(recurrent_model("LSTM", **attributes)).startswith(start)


@pytest.mark.parametrize(
    ("op_type", "activations"),
    [
        ("GRU", ["Sigmoid", "Tanh"] * 2),  # the defaults spelled out
        ("RNN", ["Relu", "Sigmoid"]),  # an RNN's own, one per direction
        ("RNN", ["Tanh", "Relu"]),
    ],
)
def test_activations_the_unrolled_form_computes(op_type, activations):
    model = recurrent_model(op_type, "bidirectional", activations=activations)
    X = _x(model)
    for value, want in zip(run(unroll_recurrent(model), {"X": X}), run(model, {"X": X})):
        np.testing.assert_allclose(value, want, atol=1e-5)
    if op_type == "RNN":  # and its gradients (the test of finite differences reads Tanh)
        names = [i.name for i in model.graph.initializer]
        grad = onnx_derivative(model, weights=names, backend="portable", fill_grad=True)
        assert {n.op_type for n in grad.graph.node} >= {"Relu"}


def test_an_rnn_activation_not_unrolled_is_refused_in_one_line():
    model = recurrent_model("RNN", activations=["Softsign"])
    assert _refusal(model).startswith(
        "RNN node 'recurrent' uses activations=['Softsign'], which ortbench does not unroll"
    )


def _with_input(model, position: int, name: str, value: np.ndarray) -> onnx.ModelProto:
    node = model.graph.node[0]
    while len(node.input) <= position:
        node.input.append("")
    node.input[position] = name
    model.graph.initializer.append(numpy_helper.from_array(value, name))
    return model


def test_peepholes_and_sequence_lengths_are_refused_in_one_line():
    peepholes = _with_input(recurrent_model("LSTM"), 7, "P", np.ones((1, 3 * HIDDEN), np.float32))
    assert _refusal(peepholes).startswith(
        "LSTM node 'recurrent' uses peepholes (input P 'P'), which ortbench does not unroll"
    )
    lengths = _with_input(recurrent_model("GRU"), 4, "lengths", np.full(BATCH, 2, np.int32))
    assert _refusal(lengths).startswith(
        "GRU node 'recurrent' uses a sequence_lens input ('lengths'), which"
    )


@pytest.mark.parametrize("op_type", ["LSTM", "GRU"])
def test_a_sequence_of_unknown_length_is_refused_in_one_line(op_type):
    message = _refusal(recurrent_model(op_type, steps="S"))
    assert message == (
        f"{op_type} node 'recurrent' reads a sequence of unknown length (input 'X' of shape "
        f"[None, 2, 4]): ortbench unrolls it over its time steps; export the model with a "
        f"fixed sequence length"
    )


def test_the_peers_refuse_it_in_the_same_line(tmp_path):
    """The torch peer's plan says why, in the same line."""
    import dataclasses

    from ortbench.bench.contenders.graph_plan import graph_plan

    problem = recurrent_problem(tmp_path, "lstm")
    model = onnx.ModelProto()
    model.CopyFrom(problem.onnx_model)
    node = next(n for n in model.graph.node if n.op_type == "LSTM")
    node.attribute.append(helper.make_attribute("clip", 2.0))
    plan = graph_plan(dataclasses.replace(problem, onnx_model=model))
    assert isinstance(plan, str) and plan.startswith(f"LSTM node {node.name!r} uses clip=2.0")
