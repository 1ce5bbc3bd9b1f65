"""Networks exported from torch, one per module users train, against torch autograd.

Each tiny network is exported with ``torch.onnx.export(..., dynamo=False)`` at opsets 17,
18 and 20 (where GELU is one Gelu node) with a dynamic batch, and at 17 with a fixed one. The gradients of both backends (``onnx_derivative``) must equal torch's on the same
weights and inputs, and a few SGD steps of both trainers on both backends must give the
weights ``torch.optim.SGD`` gives on the same batches. Skipped where torch is absent.
"""

from __future__ import annotations

import copy
import functools
import io
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest

from ortbench.training import (
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    OrtBenchError,
    onnx_derivative,
)

torch = pytest.importorskip("torch")
nn = torch.nn

BATCH, FEATURES, OUT = 4, 32, 3


class Net(nn.Module):
    """A network from a forward function over named submodules, reading (N, 32) rows."""

    def __init__(self, forward, **modules):
        super().__init__()
        self.parts = nn.ModuleDict(modules)
        self.function = forward

    def forward(self, x):
        return self.function(self.parts, x)


def _image(x, channels=2):
    return x.reshape(x.shape[0], channels, 4, 4)


def _attention(p, x):
    tokens = x.reshape(x.shape[0], 4, 8)
    attended, _ = p["attention"](tokens, tokens, tokens, need_weights=False)
    h = p["norm"](tokens + attended)
    h = h + p["gelu"](p["inner"](h))
    return p["head"](h.mean(dim=1))


def _shapes(p, x):
    h = p["first"](x).reshape(x.shape[0], 2, 4)  # Reshape
    h = h.transpose(1, 2)  # Transpose
    left, right = torch.split(h, [1, 1], dim=2)  # Split
    h = torch.cat([right, left * 2.0], dim=1)  # Concat
    h = h[:, 1:7, :].squeeze(2)  # Slice, Squeeze
    h = h.unsqueeze(1)  # Unsqueeze
    return p["head"](torch.flatten(h, 1))  # Flatten


def _arithmetic(p, x):
    h = p["first"](x)
    h = torch.where(h > 0, h, 0.3 * h)  # Where
    h = h.pow(2) + torch.sqrt(h * h + 1.0)  # Pow, Sqrt
    return p["head"](h / (1.5 + h.abs()))  # Div


def _reductions(p, x):
    h = p["first"](x).reshape(x.shape[0], 3, 4)
    return p["head"](torch.cat([h.mean(dim=1), h.sum(dim=2)], dim=1))


def _batched_matmul(p, x):
    h = torch.tanh(p["first"](x)).reshape(x.shape[0], 3, 4)
    return p["head"]((h @ h.transpose(1, 2)).flatten(1))


def _lin(n_in=FEATURES, n_out=OUT):
    return nn.Linear(n_in, n_out)


#: name -> (network factory); every network reads (N, 32) and ends with a Linear layer.
NETWORKS = {
    "Linear": lambda: nn.Sequential(_lin()),
    "Conv1d": lambda: Net(
        lambda p, x: p["head"](p["conv"](x.reshape(x.shape[0], 2, 16)).flatten(1)),
        conv=nn.Conv1d(2, 4, 3, stride=2, padding=1, dilation=2),
        head=_lin(4 * 7),
    ),
    "Conv2d": lambda: Net(
        lambda p, x: p["head"](p["conv"](_image(x)).flatten(1)),
        conv=nn.Conv2d(2, 4, 3, stride=2, padding=2, dilation=2, groups=2),
        head=_lin(4 * 2 * 2),
    ),
    # padding="same": the TorchScript exporter writes auto_pad=SAME_UPPER
    "Conv2d same": lambda: Net(
        lambda p, x: p["head"](p["conv"](_image(x)).flatten(1)),
        conv=nn.Conv2d(2, 3, 3, padding="same"),
        head=_lin(3 * 4 * 4),
    ),
    "Conv2d same, even kernel": lambda: Net(
        lambda p, x: p["head"](p["conv"](_image(x)).flatten(1)),
        conv=nn.Conv2d(2, 3, 2, padding="same", dilation=1),
        head=_lin(3 * 4 * 4),
    ),
    "MaxPool": lambda: Net(
        lambda p, x: p["head"](p["pool"](p["conv"](_image(x))).flatten(1)),
        conv=nn.Conv2d(2, 3, 3, padding=1),
        pool=nn.MaxPool2d(2),
        head=_lin(3 * 2 * 2),
    ),
    "AvgPool": lambda: Net(
        lambda p, x: p["head"](p["pool"](_image(x)).flatten(1)),
        pool=nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
        head=_lin(2 * 2 * 2),
    ),
    "AdaptiveAvgPool": lambda: Net(
        lambda p, x: p["head"](p["pool"](torch.tanh(p["conv"](_image(x)))).flatten(1)),
        conv=nn.Conv2d(2, 3, 2),
        pool=nn.AdaptiveAvgPool2d(1),
        head=_lin(3),
    ),
    "BatchNorm": lambda: nn.Sequential(_lin(FEATURES, 6), nn.BatchNorm1d(6), _lin(6)),
    # before the convolution: the exporter folds a BatchNorm that follows one into it
    "BatchNorm2d": lambda: Net(
        lambda p, x: p["head"](p["conv"](p["norm"](_image(x))).flatten(1)),
        norm=nn.BatchNorm2d(2),
        conv=nn.Conv2d(2, 2, 3),
        head=_lin(2 * 2 * 2),
    ),
    "LayerNorm": lambda: nn.Sequential(_lin(FEATURES, 6), nn.LayerNorm(6), _lin(6)),
    "GELU": lambda: nn.Sequential(_lin(FEATURES, 6), nn.GELU(), _lin(6)),
    "GELU-tanh": lambda: nn.Sequential(_lin(FEATURES, 6), nn.GELU("tanh"), _lin(6)),
    "ReLU": lambda: nn.Sequential(_lin(FEATURES, 6), nn.ReLU(), _lin(6)),
    "LeakyReLU": lambda: nn.Sequential(_lin(FEATURES, 6), nn.LeakyReLU(0.2), _lin(6)),
    "Tanh": lambda: nn.Sequential(_lin(FEATURES, 6), nn.Tanh(), _lin(6)),
    "Sigmoid": lambda: nn.Sequential(_lin(FEATURES, 6), nn.Sigmoid(), _lin(6)),
    "Softmax": lambda: nn.Sequential(_lin(FEATURES, 6), nn.Softmax(dim=1), _lin(6)),
    "LogSoftmax": lambda: nn.Sequential(_lin(FEATURES, 6), nn.LogSoftmax(dim=1), _lin(6)),
    "Dropout": lambda: nn.Sequential(_lin(FEATURES, 6), nn.Dropout(0.5), _lin(6)),
    "Embedding": lambda: Net(
        lambda p, x: p["head"](p["embedding"]((x[:, :3].abs() * 3).long() % 10).flatten(1)),
        embedding=nn.Embedding(10, 4),
        head=_lin(12),
    ),
    "residual Add": lambda: Net(
        lambda p, x: p["head"](x + torch.relu(p["inner"](x))),
        inner=_lin(FEATURES, FEATURES),
        head=_lin(),
    ),
    "shape operators": lambda: Net(_shapes, first=_lin(FEATURES, 8), head=_lin(6)),
    "batched MatMul": lambda: Net(_batched_matmul, first=_lin(FEATURES, 12), head=_lin(9)),
    "reductions": lambda: Net(_reductions, first=_lin(FEATURES, 12), head=_lin(7)),
    "Where Pow Sqrt Div": lambda: Net(_arithmetic, first=_lin(FEATURES, 5), head=_lin(5)),
    "MultiheadAttention": lambda: Net(
        _attention,
        attention=nn.MultiheadAttention(8, 2, batch_first=True),
        norm=nn.LayerNorm(8),
        inner=_lin(8, 8),
        gelu=nn.GELU(),
        head=_lin(8),
    ),
}


def _channels(module, channels: int, n_out: int = 12):
    """A network applying ``module`` to (N, channels, -1) rows of a Linear layer's output."""
    return Net(
        lambda p, x: p["head"](
            p["inner"](p["first"](x).reshape(x.shape[0], channels, -1)).flatten(1)
        ),
        first=_lin(FEATURES, n_out),
        inner=module,
        head=_lin(n_out),
    )


def _spread(module):
    return Net(
        lambda p, x: p["head"](p["inner"](4.0 * p["first"](x))),
        first=_lin(FEATURES, 12),
        inner=module,
        head=_lin(12),
    )


#: Networks of a module the training build has no gradient for (it refuses them in one
#: line): the portable backend's against torch alone.
PORTABLE_ONLY = {
    "Softplus": lambda: nn.Sequential(_lin(FEATURES, 6), nn.Softplus(), _lin(6)),
    "ELU": lambda: nn.Sequential(_lin(FEATURES, 6), nn.ELU(0.5), _lin(6)),
    "SELU": lambda: nn.Sequential(_lin(FEATURES, 6), nn.SELU(), _lin(6)),
    "CELU": lambda: nn.Sequential(_lin(FEATURES, 6), nn.CELU(0.5), _lin(6)),
    # inputs four times a Linear layer's outputs: about half beyond -3 and 3, where
    # these two saturate
    "Hardsigmoid": lambda: _spread(nn.Hardsigmoid()),
    "Hardswish": lambda: _spread(nn.Hardswish()),
    # Softplus, Tanh and Mul: the exporter writes no Mish node at opsets 17 to 20
    "Mish": lambda: nn.Sequential(_lin(FEATURES, 6), nn.Mish(), _lin(6)),
    "PReLU": lambda: nn.Sequential(_lin(FEATURES, 6), nn.PReLU(), _lin(6)),
    "PReLU per feature": lambda: nn.Sequential(_lin(FEATURES, 6), nn.PReLU(6), _lin(6)),
    "PReLU per channel": lambda: _channels(nn.PReLU(3), 3),  # its slope as (3, 1)
    "InstanceNorm1d": lambda: _channels(nn.InstanceNorm1d(3, affine=True), 3),
    "InstanceNorm2d": lambda: Net(
        lambda p, x: p["head"](p["norm"](_image(x)).flatten(1)),
        norm=nn.InstanceNorm2d(2, affine=True),
        head=_lin(FEATURES),
    ),
    # InstanceNormalization over the groups, then Mul and Add of the (4, 1) weight and bias
    "GroupNorm": lambda: _channels(nn.GroupNorm(2, 4), 4),
}


@functools.cache
def exported(name: str, opset: int, dynamic: bool = True):
    """The network ``name`` with random parameters and statistics (no two initializers
    equal, which the exporter would merge), in eval mode, and its ONNX export (with a
    dynamic batch dimension, else fixed at ``BATCH``)."""
    torch.manual_seed(len(name))
    net = {**NETWORKS, **PORTABLE_ONLY}[name]()
    with torch.no_grad():
        for key, tensor in [*net.named_parameters(), *net.named_buffers()]:
            if tensor.is_floating_point():  # variances positive, the rest about 0
                shift = 1.0 if key.endswith("running_var") else -0.5
                tensor.copy_(torch.rand_like(tensor) + shift)
    net.eval()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net,
            (torch.zeros(BATCH, FEATURES),),
            f,
            opset_version=opset,
            dynamo=False,
            input_names=["X"],
            output_names=["Y"],
            dynamic_axes={"X": {0: "N"}, "Y": {0: "N"}} if dynamic else None,
        )
    return net, onnx.load_from_string(f.getvalue())


def parameter_layouts(net, model: onnx.ModelProto) -> dict[str, tuple[str, bool]]:
    """For each trained initializer: the torch parameter it holds and whether the export
    transposed it (MultiheadAttention's input projection); an export may also give it
    axes of 1 (PReLU's and GroupNorm's per channel, as (C, 1))."""
    params = {k: v.detach().numpy() for k, v in net.named_parameters()}
    layouts = {}
    for init in model.graph.initializer:
        value = onnx.numpy_helper.to_array(init)
        for key, param in params.items():
            if np.squeeze(value).shape == np.squeeze(param).shape and np.array_equal(
                np.squeeze(value), np.squeeze(param)
            ):
                layouts[init.name] = (key, False)
            elif (
                param.ndim == 2 and value.shape == param.T.shape and np.array_equal(value, param.T)
            ):
                layouts[init.name] = (key, True)
    assert sorted(k for k, _ in layouts.values()) == sorted(params), "unmapped parameters"
    return layouts


def data(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    y = rng.standard_normal((rows, OUT)).astype(np.float32)
    return X, y


def torch_layout(grad: np.ndarray, transposed: bool, shape) -> np.ndarray:
    """A torch gradient in the layout of its initializer, of ``shape``."""
    return (grad.T if transposed else grad).reshape(shape)


@pytest.mark.parametrize(("opset", "dynamic"), [(17, True), (18, True), (17, False), (20, True)])
@pytest.mark.parametrize("backend", ["ort-training", "portable"])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_gradients_equal_torch_autograd(name, backend, opset, dynamic):
    net, model = exported(name, opset, dynamic)
    layouts = parameter_layouts(net, model)
    X, _ = data(BATCH)
    upstream = np.random.default_rng(1).standard_normal((BATCH, OUT)).astype(np.float32)
    x = torch.tensor(X, requires_grad=True)
    net.zero_grad()
    net(x).backward(torch.tensor(upstream))

    inputs = [] if name == "Embedding" else None  # its indices have no gradient
    grad = onnx_derivative(model, weights=list(layouts), inputs=inputs, backend=backend)
    session = onnxruntime.InferenceSession(grad.SerializeToString())
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    feeds = {"X": X, "Y_grad": upstream, **{n: weights[n] for n in layouts}}
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))

    expected = dict(net.named_parameters())
    for onnx_name, (torch_name, transposed) in layouts.items():
        want = torch_layout(expected[torch_name].grad.numpy(), transposed, weights[onnx_name].shape)
        np.testing.assert_allclose(
            got[f"{onnx_name}_grad"], want, rtol=1e-4, atol=1e-5, err_msg=torch_name
        )
    if inputs is None:
        np.testing.assert_allclose(got["X_grad"], x.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["GELU", "GELU-tanh", "MultiheadAttention"])
def test_opset_20_writes_gelu_as_one_node(name):
    """What the opset-20 cases above differentiate: one Gelu node, in either form (Erf or
    Tanh arithmetic before), whose gradients differ by about 1e-4."""
    _, model = exported(name, 20)
    assert "Gelu" in {node.op_type for node in model.graph.node}


@pytest.mark.parametrize("opset", [17, 18, 20])
@pytest.mark.parametrize("name", list(PORTABLE_ONLY))
def test_modules_the_training_build_lacks_have_portable_gradients(name, opset):
    from ortbench.training.errors import NoGradientError
    from ortbench.training.runtime.build import runtime_problem

    test_gradients_equal_torch_autograd(name, "portable", opset, True)
    if runtime_problem() is None:
        with pytest.raises(NoGradientError, match="no onnxruntime-training gradient for"):
            onnx_derivative(exported(name, opset)[1], backend="ort-training")


TRAINERS = {"full": FullTrainer, "forward-backward": ForwardBackwardTrainer}


@pytest.mark.parametrize("trainer", list(TRAINERS))
@pytest.mark.parametrize("backend", ["ort-training", "portable"])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_sgd_steps_equal_torch_sgd(name, backend, trainer):
    """Two epochs of three batches, no shuffling: the weights torch.optim.SGD reaches on
    the same batches, with the half squared error averaged over the batch."""
    net, model = exported(name, 17)
    layouts = parameter_layouts(net, model)
    net = copy.deepcopy(net)  # the cached one stays as exported
    X, y = data(3 * BATCH, seed=2)
    rate, epochs = 0.02, 2
    fitted = TRAINERS[trainer](
        model,
        weights_to_train=list(layouts),
        learning_rate=LearningRateSGD(eta0=rate),
        batch_size=BATCH,
        max_iter=epochs,
        shuffle=False,
        backend=backend,
    ).fit(X, y)

    optimizer = torch.optim.SGD(net.parameters(), lr=rate)
    for _ in range(epochs):
        for start in range(0, len(X), BATCH):
            optimizer.zero_grad()
            batch = torch.tensor(X[start : start + BATCH])
            target = torch.tensor(y[start : start + BATCH])
            (0.5 * ((net(batch) - target) ** 2).sum(dim=1).mean()).backward()
            optimizer.step()
    state = fitted.get_state()
    expected = dict(net.named_parameters())
    for onnx_name, (torch_name, transposed) in layouts.items():
        want = torch_layout(
            expected[torch_name].detach().numpy(), transposed, state[onnx_name].shape
        )
        np.testing.assert_allclose(state[onnx_name], want, rtol=1e-4, atol=2e-5, err_msg=torch_name)
    assert fitted.train_losses_[-1] < fitted.train_losses_[0]


@pytest.mark.training_build
def test_failure_names_operator_and_node():
    """An operator onnxruntime-training has no gradient for: one line with its name and
    node, whatever the builder's message."""
    from onnx import helper

    nodes = [
        helper.make_node("Mul", ["X", "W"], ["h"], name="scale"),
        helper.make_node("Round", ["h"], ["Y"], name="rounding"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", 1, [2, 3])],
        [helper.make_tensor_value_info("Y", 1, [2, 3])],
        [onnx.numpy_helper.from_array(np.ones((2, 3), np.float32), "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OrtBenchError) as error:
        onnx_derivative(model, backend="ort-training")
    assert (
        str(error.value)
        == "no onnxruntime-training gradient for operator 'Round' (node 'rounding')"
    )


@pytest.mark.training_build
def test_builder_source_text_becomes_operator_and_node():
    """The builder's own failure on torch's LayerNormalization (no statistics outputs)
    names the node, not the runtime's source file."""
    from ortbench.training.gradients.ort_preparation import gradient_builder_error
    from ortbench.training.runtime import capi
    from ortbench.training.runtime.sessions import session_options

    _, model = exported("LayerNorm", 17)
    loss = onnx.helper.make_node("ReduceSum", ["Y"], ["loss"], keepdims=0)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.node.append(loss)
    model.graph.output.append(onnx.helper.make_tensor_value_info("loss", 1, []))
    builder = capi.GradientGraphBuilder(
        model.SerializeToString(), {"loss"}, {"X"}, "loss", session_options()
    )
    with pytest.raises(RuntimeError) as raised:
        builder.build()
    assert "onnxruntime_src" in str(raised.value)
    message = str(gradient_builder_error(raised.value, model))
    assert message == (
        "no onnxruntime-training gradient for operator 'LayerNormalization' "
        "(node '/1/LayerNormalization')"
    )
    # the source file may come without its folder: still no source text
    raised = RuntimeError(
        "[ONNXRuntimeError] : 1 : FAIL : graph_augmenter.cc:23 AddToExistingNodeArgs add "
        "graph outputs - failed to find NodeArg by name: val_7_grad"
    )
    assert str(gradient_builder_error(raised, model)) == message
