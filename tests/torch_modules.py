"""Small torch networks of the modules users bring, and their ONNX exports (tests only).

Every network reads a (rows, features) matrix, as ortbench feeds it, and reshapes it
itself where its layers need images or tokens.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
import torch
from torch import nn
from torch.nn import functional as F


class Images(nn.Module):
    """Two conv layers (stride, padding, dilation, groups) with max, average and global
    average pooling."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 8, 3, stride=1, padding=(1, 2), dilation=(1, 2), groups=2)
        self.conv3 = nn.Conv2d(8, 6, 2, stride=2)
        self.out = nn.Linear(6 + 8 * 2 * 2, 3)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.conv1(x.reshape(-1, 1, 8, 8))), 2)
        x = F.avg_pool2d(torch.relu(self.conv2(x)), 2)
        pooled = F.adaptive_avg_pool2d(self.conv3(x), 1).flatten(1)
        return torch.softmax(self.out(torch.cat([pooled, x.flatten(1)], 1)), 1)


class Signal(nn.Module):
    """Conv1d with a sigmoid and a dropout exported for inference."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 3, 3, padding=1, stride=2)
        self.drop = nn.Dropout(0.3)
        self.out = nn.Linear(3 * 3, 2)

    def forward(self, x):
        return self.out(self.drop(torch.sigmoid(self.conv(x.reshape(-1, 2, 6)))).flatten(1))


class Normalized(nn.Module):
    """Linear, LayerNorm, BatchNorm (frozen statistics), GELU in both forms, LeakyReLU, Tanh."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(6, 8)
        self.layer_norm = nn.LayerNorm(8)
        self.batch_norm = nn.BatchNorm1d(8)
        self.second = nn.Linear(8, 8)
        self.out = nn.Linear(16, 2)

    def forward(self, x):
        h = F.gelu(self.layer_norm(self.first(x)))
        g = F.gelu(self.batch_norm(self.second(h)), approximate="tanh")
        return torch.log_softmax(self.out(torch.cat([F.leaky_relu(h, 0.1), torch.tanh(g)], 1)), 1)


class Shapes(nn.Module):
    """Embedding (Gather), Split, Slice, Squeeze/Unsqueeze, Transpose, reductions, Where,
    Pow, Sqrt, Div."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(5, 3)
        self.linear = nn.Linear(6, 6)

    def forward(self, x):
        h = self.linear(x)
        a, b = h.split([2, 4], 1)
        c = torch.cat([b[:, 1:3].unsqueeze(2).squeeze(2), a.pow(2), torch.sqrt(a * a + 1) / 2], 1)
        c = torch.where(c > 0, c, 0.1 * c) + c.mean(1, keepdim=True) - c.sum(1, keepdim=True) / 7
        tokens = (x[:, :2].abs() * 3).long() % 5
        e = self.embedding(tokens).transpose(1, 2).flatten(1)
        return torch.cat([c, e], 1)


class Attention(nn.Module):
    """One encoder block on the rows of an 8x8 image: multi-head attention, residual adds,
    LayerNorm, GELU."""

    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.norm1 = nn.LayerNorm(8)
        self.norm2 = nn.LayerNorm(8)
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        t = x.reshape(-1, 8, 8)
        t = self.norm1(t + self.attention(t, t, t, need_weights=False)[0])
        t = self.norm2(t + self.down(F.gelu(self.up(t))))
        return self.out(t.mean(1))


class Activations(nn.Module):
    """The modules onnxruntime-training has no gradient for: SELU, CELU, Hardsigmoid,
    Hardswish, Mish, PReLU (one slope, one per channel), InstanceNorm1d, GroupNorm."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(6, 12)
        self.prelu = nn.PReLU()
        self.channel_prelu = nn.PReLU(3)
        self.instance_norm = nn.InstanceNorm1d(3, affine=True)
        self.group_norm = nn.GroupNorm(2, 4)
        self.out = nn.Linear(9 * 12, 2)

    def forward(self, x):
        h = self.first(x)
        wide = 3 * h  # beyond -3 and 3 too, where the hard ones saturate
        channels = h.reshape(-1, 3, 4)
        parts = [
            F.selu(h),
            F.celu(h, 0.5),
            F.hardsigmoid(wide),
            F.hardswish(wide),
            F.mish(h),
            self.prelu(h),
            self.channel_prelu(channels).flatten(1),
            self.instance_norm(channels).flatten(1),
            self.group_norm(h.reshape(-1, 4, 3)).flatten(1),
        ]
        return self.out(torch.cat(parts, 1))


#: name -> (network class, input features)
NETWORKS = {
    "images": (Images, 64),
    "signal": (Signal, 12),
    "normalized": (Normalized, 6),
    "shapes": (Shapes, 6),
    "attention": (Attention, 64),
}

#: Networks onnxruntime-training cannot differentiate: the runners' tests read them, the
#: test that trains each network of NETWORKS with every contender does not
#: (name -> (network class, input features)).
PORTABLE_ONLY = {"activations": (Activations, 6)}


class Recurrent(nn.Module):
    """An RNN, LSTM or GRU over the rows of an 8x8 image (8 time steps of 8 features), a
    Linear head on the last step's output, and a softmax."""

    def __init__(self, kind="LSTM", batch_first=True, bidirectional=False, layers=1, **options):
        super().__init__()
        self.batch_first = batch_first
        self.rnn = getattr(nn, kind)(
            8, 6, num_layers=layers, batch_first=batch_first, bidirectional=bidirectional,
            **options,
        )  # fmt: skip
        self.out = nn.Linear(12 if bidirectional else 6, 3)

    def forward(self, x):
        steps = x.reshape(-1, 8, 8)
        if not self.batch_first:
            steps = steps.transpose(0, 1)
        y, _ = self.rnn(steps)
        return torch.softmax(self.out(y[:, -1] if self.batch_first else y[-1]), 1)


#: RNN, LSTM and GRU networks (every contender trains them through their unrolled form);
#: no other test reads them (name -> (network class, input features)).
RECURRENT = {
    "lstm": (lambda: Recurrent("LSTM"), 64),
    "lstm, seq first, bidirectional": (lambda: Recurrent("LSTM", False, True), 64),
    "lstm, 2 layers, bidirectional": (lambda: Recurrent("LSTM", True, True, 2), 64),
    "gru": (lambda: Recurrent("GRU"), 64),
    "gru, seq first, 2 layers": (lambda: Recurrent("GRU", False, False, 2), 64),
    "gru, bidirectional": (lambda: Recurrent("GRU", True, True), 64),
    "rnn": (lambda: Recurrent("RNN"), 64),
    "rnn, relu, seq first, bidirectional": (
        lambda: Recurrent("RNN", False, True, nonlinearity="relu"),
        64,
    ),
}


def network(name: str, seed: int = 0) -> nn.Module:
    """Network ``name`` in eval mode, every parameter and buffer drawn at random: the
    exporter shares equal initial tensors (a zero bias, a zero running mean), and random
    values keep each parameter its own initializer."""
    torch.manual_seed(seed)
    module = {**NETWORKS, **PORTABLE_ONLY, **RECURRENT}[name][0]().eval()
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            if tensor.is_floating_point():
                tensor.copy_(
                    torch.rand_like(tensor) * 0.8 + 0.2
                    if tensor.dim() == 1
                    else torch.randn_like(tensor) * 0.4
                )
    return module


def export(module: nn.Module, features: int, opset: int = 17, batch: int | None = None):
    """The TorchScript exporter's ONNX model; a dynamic batch axis unless ``batch`` fixes it."""
    buffer = io.BytesIO()
    axes = None if batch else {"X": {0: "n"}, "Y": {0: "n"}}
    with warnings.catch_warnings():  # the exporter's deprecation and tracer warnings
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (torch.zeros(batch or 4, features),),
            buffer,
            opset_version=opset,
            dynamo=False,
            input_names=["X"],
            output_names=["Y"],
            dynamic_axes=axes,
        )
    return onnx.load_from_string(buffer.getvalue())


@dataclass
class ExportedCase:
    """A network with random parameters, its export, 5 rows of input, onnxruntime's output
    on them, the module's parameters by name and the initializers that hold them."""

    module: nn.Module
    model: onnx.ModelProto
    x: torch.Tensor
    expected: np.ndarray
    parameters: dict[str, nn.Parameter]
    trained: list[str]


def exported_case(name: str, opset: int) -> ExportedCase:
    """What a runner of ONNX graphs is checked against for network ``name`` at ``opset``."""
    import onnxruntime

    module, features = network(name), {**NETWORKS, **PORTABLE_ONLY}[name][1]
    model = export(module, features, opset)
    x = torch.randn(5, features, generator=torch.Generator().manual_seed(1))
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    expected = session.run(None, {"X": x.numpy()})[0]
    parameters = dict(module.named_parameters())
    trained = [i.name for i in model.graph.initializer if i.name in parameters]
    assert len(trained) >= len(parameters) // 2, "the export renamed most parameters"
    return ExportedCase(module, model, x, expected, parameters, trained)
