"""torch as the peer of any model: the torch contenders train the user's own network."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import onnx
import pandas as pd
import pytest
from sklearn.datasets import load_digits

torch = pytest.importorskip("torch")
from helpers import timed  # noqa: E402
from torch_modules import NETWORKS, export, network  # noqa: E402

from ortbench.bench.contenders import make_contender  # noqa: E402
from ortbench.bench.problems import make_problem  # noqa: E402
from ortbench.bench.user_model import UserFiles, load_user_problem  # noqa: E402


def digits_files(folder, module_name: str, classes: int, batch: int | None = None):
    """An exported network and 3-class digits data, as a user brings them."""
    X, y = load_digits(return_X_y=True)
    X, y = (X[:400] / 16).astype(np.float32), y[:400] % classes
    onnx.save(export(network(module_name), 64, batch=batch), folder / "net.onnx")
    np.savez(folder / "digits.npz", X=X, y=y)
    return UserFiles(str(folder / "net.onnx"), (str(folder / "digits.npz"),), loss="log")


def torch_sgd_losses(
    module, problem, epochs: int, batch: int, momentum: float = 0.0, squared: bool = False
):
    """The torch module itself trained by SGD on the problem's batches, in order: the loss
    of each epoch (mean over rows of each batch's loss before its update), the log loss
    of its probabilities, or half the squared error of its one output."""
    X = torch.from_numpy(np.array(problem.data.X_train))
    if squared:
        y = torch.from_numpy(np.array(problem.data.y_train, np.float32)).reshape(-1, 1)
    else:
        y = torch.from_numpy(np.searchsorted(problem.classes, problem.data.y_train))
    optimizer = torch.optim.SGD(
        module.parameters(), lr=problem.eta0, momentum=momentum, nesterov=momentum > 0
    )
    curve = []
    for _ in range(epochs):
        total = 0.0
        for start in range(0, len(X), batch):
            rows = slice(start, start + batch)
            optimizer.zero_grad()
            if squared:
                loss = (0.5 * (module(X[rows]) - y[rows]) ** 2).mean()
            else:
                p = module(X[rows]).clamp(np.finfo(np.float32).eps, 1 - np.finfo(np.float32).eps)
                loss = -torch.log(p[torch.arange(len(p)), y[rows]]).mean()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(X[rows])
        curve.append(total / len(X))
    return curve


@pytest.mark.parametrize(
    ("name", "momentum", "exported", "batch"),
    [("torch-sgd", 0.0, None, 16), ("torch-nesterov", 0.9, None, 16), ("torch-sgd", 0.0, 16, 10)],
)
def test_torch_trains_the_exported_cnn_as_torch_itself_does(
    tmp_path, name, momentum, exported, batch
):
    """With a dynamic batch axis, and exported for 16 rows (trained 10 at a time)."""
    problem = load_user_problem(digits_files(tmp_path, "images", 3, exported))
    contender = make_contender(name, problem, batch, shuffle=False).fit(2)
    expected = torch_sgd_losses(network("images").train(), problem, 2, batch, momentum)
    np.testing.assert_allclose(contender.loss_curve_, expected, rtol=1e-5)
    assert contender.loss_curve_[-1] < contender.loss_curve_[0]


ENGINE = ["ort-full", "ort-fwbw", "ort-portable-full", "ort-portable-fwbw"]


@pytest.mark.parametrize("batch", [None, 16], ids=["dynamic axes", "fixed batch"])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_bench_trains_each_exported_module_with_every_contender(tmp_path, name, batch):
    """``ortbench bench --model`` on the torch export of each listed module: every engine
    contender and the torch peer train it, whether the export fixed its batch or not."""
    from ortbench.bench.store import RESULTS_CSV
    from ortbench.cli import main
    from ortbench.training.runtime.build import runtime_problem

    module = network(name)
    onnx.save(export(module, NETWORKS[name][1], batch=batch), tmp_path / "net.onnx")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, NETWORKS[name][1])).astype(np.float32)
    with torch.no_grad():
        width = module(torch.from_numpy(X[:2])).shape[1]
    np.savez(tmp_path / "d.npz", X=X, y=rng.standard_normal((len(X), width)).astype(np.float32))
    engine = ENGINE if runtime_problem() is None else ENGINE[2:]
    out = tmp_path / "out"
    code = main([
        "bench", "--model", str(tmp_path / "net.onnx"), "--data", str(tmp_path / "d.npz"),
        "--loss", "squared_error", "--contenders", *engine, "torch-sgd", "--batch-sizes", "8",
        "--devices", "cpu", "--epochs", "1", "--repeat", "1", "--keep-going", "--out", str(out),
    ])  # fmt: skip
    assert code == 0
    (folder,) = out.iterdir()
    rows = pd.read_csv(folder / RESULTS_CSV).set_index("contender")
    assert sorted(rows.index) == sorted([*engine, "torch-sgd"])
    for contender, row in rows.iterrows():
        # trained: a finite loss; an unstable time on a loaded machine is still a timed cell
        assert timed(row.status), (contender, row.status)
        assert np.isfinite(row.final_train_loss), contender
    # every contender trained the same network from the same weights on the same batches
    np.testing.assert_allclose(rows.final_train_loss, rows.final_train_loss.iloc[0], rtol=1e-3)


def test_torch_reads_its_losses_once_per_epoch(monkeypatch):
    """Each step's loss stays on the device; one read per epoch, as the engine and JAX do
    (a read per step would make a GPU wait for every step before queueing the next)."""
    contender = make_contender("torch-sgd", make_problem("mlp"), 16)
    reads = []
    item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda t: reads.append(1) or item(t))
    contender.fit(2)
    assert len(reads) == 2
    assert len(contender.loss_curve_) == 2 and contender.loss_curve_[1] < contender.loss_curve_[0]


#: How users export: torch's default exporter (dynamo), and options of both exporters that
#: keep each parameter its own initializer.
EXPORTS = {
    "dynamo": {"dynamo": True, "dynamic_shapes": ({0: "n"},)},
    "dynamo, optimize=False": {"dynamo": True, "dynamic_shapes": ({0: "n"},), "optimize": False},
    "TorchScript, keep_initializers_as_inputs": {
        "dynamo": False, "dynamic_axes": {"X": {0: "n"}}, "keep_initializers_as_inputs": True
    },
    "TorchScript": {"dynamo": False, "dynamic_axes": {"X": {0: "n"}}},
}  # fmt: skip


def attention_problem(folder, module, export_options):
    """The attention network with a softmax, exported as ``export_options`` say, on
    3-class digits at a rate where a wrongly trained value shows in the second epoch."""
    if export_options["dynamo"]:
        pytest.importorskip("onnxscript")
    path = folder / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, (torch.zeros(4, 64),), str(path), input_names=["X"], **export_options
        )
    X, y = load_digits(return_X_y=True)
    np.savez(folder / "digits.npz", X=(X[:200] / 16).astype(np.float32), y=y[:200] % 3)
    files = UserFiles(str(path), (str(folder / "digits.npz"),), loss="log")
    return dataclasses.replace(load_user_problem(files), eta0=0.1)


def assert_every_contender_follows(problem, expected):
    """The engine's full and forward/backward contenders, the torch peer and JAX's where
    jax is installed, 3 epochs."""
    import importlib.util

    from ortbench.training.runtime.build import runtime_problem

    names = ["ort-portable-full", "ort-portable-fwbw", "torch-sgd"]
    if runtime_problem() is None:
        names += ["ort-full", "ort-fwbw"]
    if importlib.util.find_spec("jax") is not None:
        names.append("jax-sgd")
    for name in names:
        contender = make_contender(name, problem, 16, shuffle=False).fit(3)
        np.testing.assert_allclose(contender.loss_curve_, expected, rtol=3e-6, err_msg=name)


@pytest.mark.parametrize("export", ["dynamo", "dynamo, optimize=False"])
def test_the_default_exporter_s_attention_trains_as_torch_itself_does(tmp_path, export):
    """torch's default exporter (``dynamo=True``) writes Gelu as one node (opset 20), the
    attention's scale as a one-value initializer ``val_<n>`` (a constant, not trained),
    and without its optimizer CastLike nodes: the engine and the torch peer follow the
    module's own trajectory."""
    module = torch.nn.Sequential(network("attention"), torch.nn.Softmax(1)).eval()
    problem = attention_problem(tmp_path, module, EXPORTS[export])
    nodes = {node.op_type for node in problem.onnx_model.graph.node}
    assert "Gelu" in nodes and ("CastLike" in nodes) == (export != "dynamo")
    scales = [i.name for i in problem.onnx_model.graph.initializer if list(i.dims) == [1]]
    assert any(name.startswith("val_") for name in scales) == (export == "dynamo")
    assert_every_contender_follows(problem, torch_sgd_losses(module.train(), problem, 3, 16))


@pytest.mark.parametrize("export", list(EXPORTS))
def test_merged_parameters_train_tied_with_a_warning(tmp_path, export):
    """As initialised, LayerNorm's weights are ones and the biases zeros: both exporters
    merge parameters of equal values into one initializer by default, which then trains
    tied, unlike the module's, and says so; the options that keep them apart train as
    torch does, without a word."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(NETWORKS["attention"][0](), torch.nn.Softmax(1)).eval()
    merged = export in ("dynamo", "TorchScript")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problem = attention_problem(tmp_path, module, EXPORTS[export])
    said = [str(w.message) for w in caught if "torch's exporter merged them" in str(w.message)]
    assert len(said) == merged, said
    expected = torch_sgd_losses(module.train(), problem, 3, 16)
    if merged:
        contender = make_contender("ort-portable-full", problem, 16, shuffle=False).fit(3)
        assert abs(contender.loss_curve_[-1] / expected[-1] - 1) > 1e-3
    else:
        assert_every_contender_follows(problem, expected)


class Standardised(torch.nn.Module):
    """A network with buffers (the inputs' mean and spread), a parameter added to its
    inputs and a constant of ``forward``: torch trains the parameters only."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mu", torch.randn(16))
        self.register_buffer("sd", torch.rand(16) + 0.5)
        self.shift = torch.nn.Parameter(torch.randn(16) * 0.1)
        self.hidden, self.out = torch.nn.Linear(16, 4), torch.nn.Linear(4, 1)

    def forward(self, x):
        scale = torch.tensor([1.5, 2.5, 3.5, 4.5])
        return self.out(torch.relu(self.hidden((x - self.mu) / self.sd + self.shift)) * scale)


def test_buffers_and_constants_of_a_default_export_stay_constant(tmp_path):
    """torch's default exporter writes buffers and the constants of forward as
    initializers like the parameters: they are left out of the trained weights, with a
    warning naming them, and every contender follows torch's own SGD trajectory."""
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    module = Standardised().eval()
    path = tmp_path / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, (torch.zeros(4, 16),), str(path), input_names=["X"], dynamo=True,
            dynamic_shapes=({0: "n"},),
        )  # fmt: skip
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 16)).astype(np.float32)
    np.savez(tmp_path / "d.npz", X=X, y=X[:, :4].sum(1).astype(np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = UserFiles(str(path), (str(tmp_path / "d.npz"),), loss="squared_error")
        problem = dataclasses.replace(load_user_problem(files), eta0=0.01)
    said = [str(w.message) for w in caught if "buffers or constants" in str(w.message)]
    assert said and "['mu', 'sd', 'clone']" in said[0], said
    expected = torch_sgd_losses(module.train(), problem, 3, 16, squared=True)
    assert_every_contender_follows(problem, expected)


@pytest.mark.parametrize(
    "ending, message",
    [
        (torch.nn.LogSoftmax(1), r"holds values outside \[0, 1\] \(from -.*not LogSoftmax"),
        (torch.nn.Identity(), r"holds values outside \[0, 1\].*or raw scores"),
    ],
)
def test_an_output_that_holds_no_probabilities_is_refused_for_the_log_loss(
    tmp_path, ending, message
):
    """The log loss reads probabilities: log-probabilities (LogSoftmax) or raw scores
    trained with it gave NaN on some contenders and a constant loss on others."""
    from ortbench.errors import OrtBenchError

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 2), ending).eval()
    onnx.save(export(module, 8), tmp_path / "net.onnx")
    X = np.random.default_rng(0).standard_normal((160, 8)).astype(np.float32)
    np.savez(tmp_path / "d.npz", X=X * 3, y=(X[:, 0] > 0).astype(np.int64))
    files = UserFiles(str(tmp_path / "net.onnx"), (str(tmp_path / "d.npz"),), loss="log")
    with pytest.raises(OrtBenchError, match=message):
        load_user_problem(files)


def test_a_warning_about_the_model_is_said_once_by_the_command(tmp_path, capsys):
    """Each contender reads the same model, each from its own code: the command says a
    warning about it once."""
    from ortbench.cli import main

    torch.manual_seed(0)
    module = torch.nn.Sequential(NETWORKS["attention"][0](), torch.nn.Softmax(1)).eval()
    problem = attention_problem(tmp_path, module, EXPORTS["TorchScript"])
    assert problem.onnx_model is not None
    capsys.readouterr()
    code = main([
        "bench", "--model", str(tmp_path / "net.onnx"), "--data", str(tmp_path / "digits.npz"),
        "--loss", "log", "--contenders", "ort-portable-full", "ort-portable-fwbw", "torch-sgd",
        "--batch-sizes", "16", "--epochs", "1", "--repeat", "1", "--keep-going",
        "--out", str(tmp_path / "out"),
    ])  # fmt: skip
    assert code == 0
    said = [x for x in capsys.readouterr().err.splitlines() if "exporter merged them" in x]
    assert len(said) == 1, said
