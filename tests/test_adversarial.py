"""A new user's mistakes and files ortbench did not write: each gets the right value, one
line and exit status 2, or leaves the user's files untouched; nothing is lost in silence."""

from __future__ import annotations

import hashlib
import math
import subprocess
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from skl2onnx import to_onnx
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPRegressor

from ortbench.bench.checkouts import checkout
from ortbench.bench.store import COLUMNS, RESULTS_CSV, RESULTS_JSONL, ResultsWriter
from ortbench.cli import _parser, main
from ortbench.commands.bench import matrix_config
from ortbench.training import ForwardBackwardTrainer, FullTrainer, OrtBenchError

TRAINERS = [ForwardBackwardTrainer, FullTrainer]
RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 4)).astype(np.float32)
Y01 = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(np.int64)
YREG = (2 * X[:, 0] - X[:, 2]).astype(np.float32)


def _mlp(hidden: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(MLPRegressor(hidden_layer_sizes=(hidden,), max_iter=3).fit(X, YREG), X[:1])


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the rows ------------------------------------------------------------------


@pytest.mark.parametrize("zipmap", [False, True])
@pytest.mark.parametrize("cls", TRAINERS)
def test_exported_classifier_answers_what_predict_answers(cls, zipmap):
    """Fitted on labels 3 and 7, a graph converted on 0 and 1 exports 3 and 7."""
    onx = to_onnx(LogisticRegression().fit(X, Y01), X[:1], options={"zipmap": zipmap})
    y = np.where(Y01 == 1, 7, 3)
    trainer = cls(onx, max_iter=3, random_state=0).fit(X, y)
    session = onnxruntime.InferenceSession(trainer.get_trained_onnx().SerializeToString())
    labels, probabilities = session.run(None, {session.get_inputs()[0].name: X})
    np.testing.assert_array_equal(labels, trainer.predict(X))
    assert set(labels.tolist()) == {3, 7}
    if zipmap:
        assert sorted(probabilities[0]) == [3, 7]
        proba = np.array([[p[3], p[7]] for p in probabilities])
        np.testing.assert_allclose(proba, trainer.predict_proba(X), rtol=1e-6)


@pytest.mark.parametrize("cls", TRAINERS)
def test_a_3_class_graph_on_2_classes_is_refused(cls):
    onx = to_onnx(LogisticRegression().fit(X, RNG.integers(0, 3, len(X))), X[:1])
    with pytest.raises(OrtBenchError) as e:
        cls(onx, max_iter=1).fit(X, Y01)
    assert str(e.value) == (
        "y has 2 classes, the model outputs 3 columns (one per class): convert a classifier "
        "fitted on 2 classes"
    )
    binary = to_onnx(LogisticRegression().fit(X, Y01), X[:1])  # one score column
    with pytest.raises(OrtBenchError) as e:
        cls(binary, max_iter=1).fit(X, RNG.integers(0, 3, len(X)))
    assert str(e.value) == (
        "y has 3 classes, the model outputs one column (two classes): convert a classifier "
        "fitted on 3 classes"
    )


@pytest.mark.parametrize("cls", TRAINERS)
def test_a_new_model_does_not_warm_start(cls):
    first, second = _mlp(5), _mlp(7)
    trainer = cls(first, max_iter=2, warm_start=True, random_state=0).fit(X, YREG)
    trainer.set_params(model_onnx=second)
    with pytest.warns(UserWarning, match="warm start does not apply, model_onnx changed"):
        trainer.fit(X, YREG)
    fresh = cls(second, max_iter=2, random_state=0).fit(X, YREG)
    state, expected = trainer.get_state(), fresh.get_state()
    assert {k: v.shape for k, v in state.items()} == {k: v.shape for k, v in expected.items()}
    for name, value in expected.items():
        np.testing.assert_allclose(state[name], value, rtol=1e-5, atol=1e-6)
    assert len(trainer.train_losses_) == 2


def _run_folder(folder: Path, rows: list[dict] | None = None) -> Path:
    """A run folder holding ``rows`` (overrides of one good ort-fwbw cell)."""
    writer = ResultsWriter(folder)
    for override in rows or [{}]:
        row = dict.fromkeys(COLUMNS, math.nan)
        row.update(
            run_id=folder.name, contender="ort-fwbw", problem="mlp",
            dataset="make_regression", batch_size=16, device="cpu", status="ok",
            seconds_per_step=1e-3, runs_per_step=2.0, ortvalues_per_step=0.0,
        )  # fmt: skip
        row.update(override)
        writer.append(row, [row["seconds_per_step"]] * 5, [1.0, 0.5])
    return folder


@pytest.mark.parametrize("name", [RESULTS_JSONL, RESULTS_CSV, "calibration.json", "timings.csv"])
@pytest.mark.parametrize("option", ["--out", "--html"])
def test_compare_never_writes_over_a_run_data_file(tmp_path, capsys, name, option):
    run = _run_folder(tmp_path / "run")
    target = run / name
    if not target.exists():
        target.write_text("{}\n")
    before = _digest(target)
    assert main(["compare", str(run), str(run), option, str(target)]) == 2
    assert capsys.readouterr().err == (
        f"ortbench: error: cannot use {option} {target}: it is a run's data file, which "
        "ortbench never writes over; choose another path\n"
    )
    assert _digest(target) == before


@pytest.mark.parametrize("name", ["index.html", "summary.md"])
@pytest.mark.parametrize("option", ["--out", "--html"])
def test_compare_does_not_take_the_place_of_a_runs_own_report(tmp_path, capsys, name, option):
    """A comparison written as a run folder's ``index.html`` or ``summary.md`` would hide
    the run's own report: refused; the same name elsewhere is fine."""
    run = _run_folder(tmp_path / "run")
    assert main(["report", str(run)]) == 0
    target = run / name
    before = _digest(target)
    capsys.readouterr()
    assert main(["compare", str(run), str(run), option, str(target)]) == 2
    assert capsys.readouterr().err == (
        f"ortbench: error: cannot use {option} {target}: it is the run's own report "
        "(ortbench report writes it); choose another path\n"
    )
    assert _digest(target) == before
    assert main(["compare", str(run), str(run), option, str(tmp_path / name)]) == 0


@pytest.mark.parametrize("name", [RESULTS_CSV, "summary.md"])
@pytest.mark.parametrize("option", ["--out", "--html"])
def test_compare_never_writes_through_a_link_to_a_run_s_file(tmp_path, capsys, name, option):
    """A link elsewhere that names a run's data file or its own report writes into that
    file: refused as the file itself is, the message naming both."""
    run = _run_folder(tmp_path / "run")
    assert main(["report", str(run)]) == 0
    target = run / name
    link = tmp_path / "report.md"
    link.symlink_to(target)
    before = _digest(target)
    capsys.readouterr()
    assert main(["compare", str(run), str(run), option, str(link)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ortbench: error: cannot use {option} {link} (a link to {target}): ")
    assert len(err.splitlines()) == 1 and _digest(target) == before


@pytest.mark.parametrize("text", ["garbage\n", "a,b\n1,2\n", "\xff\xfe\n"])
def test_report_of_damaged_loss_curves_is_one_line(tmp_path, capsys, text):
    """A damaged ``loss_curves.csv``: one line naming it and the way out (deleting it
    reports the run without its curves)."""
    run = _run_folder(tmp_path / "run")
    (run / "loss_curves.csv").write_bytes(text.encode("latin-1"))
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ortbench: error: {run / 'loss_curves.csv'} is not ortbench's loss")
    assert len(err.splitlines()) == 1
    (run / "loss_curves.csv").unlink()
    assert main(["report", str(run)]) == 0


def test_a_cut_last_row_is_named_not_taken_for_an_interruption(tmp_path, capsys):
    """A run killed while it wrote its last row (no signal handler ran: its plan says it
    was not interrupted): compare names the cut line as a bad row and does not judge the
    cell it may be, rather than reporting it "not run: interrupted"."""
    rows = [{"batch_size": 16}, {"batch_size": 32}]
    base, head = _run_folder(tmp_path / "base", rows), _run_folder(tmp_path / "head", rows)
    text = (head / RESULTS_JSONL).read_text()
    (head / RESULTS_JSONL).write_text(text[: text.rindex("{") + 40])
    assert main(["compare", str(base), str(head)]) == 0
    out, err = capsys.readouterr()
    assert "bad row left out: " in err and "line 2: cut short" in err
    assert "interrupted" not in out and "batch_size=16" in out


@pytest.mark.parametrize("command", [["bench", "--quick"], ["profile", "ort-fwbw"]])
def test_bench_and_profile_out_refuse_a_run_data_file(tmp_path, capsys, command):
    target = _run_folder(tmp_path / "run") / RESULTS_CSV
    before = _digest(target)
    assert main([*command, "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ortbench: error: cannot use --out {target}: it is a run's data")
    assert len(err.splitlines()) == 1 and _digest(target) == before


def test_repeated_values_run_once_with_one_note(capsys):
    argv = ["bench", "--contenders", "ort-fwbw", "ort-fwbw", "--batch-sizes", "16", "16"]
    config = matrix_config(_parser().parse_args(argv))
    assert config.contenders == ("ort-fwbw",) and config.batch_sizes == (16,)
    assert capsys.readouterr().err == (
        "ortbench: note: repeated values run once: --contenders ort-fwbw ort-fwbw; "
        "--batch-sizes 16 16\n"
    )


def test_ab_says_head_is_the_commit_without_the_uncommitted_changes(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "ortbench").mkdir(parents=True)
    (repo / "ortbench" / "__init__.py").write_text("")
    (repo / "ortbench" / "cli.py").write_text("")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    monkeypatch.chdir(repo)
    lines: list[str] = []
    checkout("HEAD", tmp_path / "cache", lines.append)
    assert lines == []
    (repo / "ortbench" / "__init__.py").write_text("x = 1\n")
    (repo / "ortbench" / "cli.py").write_text("y = 1\n")
    side = checkout("HEAD", tmp_path / "cache", lines.append)
    assert lines == [
        f"HEAD is commit {commit.stdout[:8]}: 2 files have uncommitted changes it does not "
        "hold; pass . to time the working tree"
    ]
    assert (side.tree / "ortbench" / "__init__.py").read_text() == ""


# -- raw errors left from earlier cases --------------------------------------------------


def test_an_empty_loss_output_name_is_one_line():
    with pytest.raises(OrtBenchError) as e:
        FullTrainer(_mlp(5), max_iter=1, loss_output_name="").fit(X, YREG)
    assert str(e.value) == "loss_output_name must be a non-empty string such as 'loss', got ''"


def test_save_onnx_graph_into_a_file_leaves_it_untouched(tmp_path):
    trainer = ForwardBackwardTrainer(_mlp(5), max_iter=1).fit(X, YREG)
    target = tmp_path / "graphs"
    target.write_text("mine")
    with pytest.raises(OrtBenchError) as e:
        trainer.save_onnx_graph(target)
    assert str(e.value) == f"cannot write the graphs into folder {target}: a file is there"
    assert target.read_text() == "mine"


def _two_outputs(order: str) -> onnx.ModelProto:
    """Outputs 'a' = X @ A and 'b' = X @ B, in ``order``."""
    weights = [
        numpy_helper.from_array(RNG.normal(size=(4, 1)).astype(np.float32), name) for name in "AB"
    ]
    nodes = [helper.make_node("MatMul", ["X", w], [w.lower()]) for w in "AB"]
    outputs = {n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 1]) for n in "ab"}
    graph = helper.make_graph(
        nodes,
        "two",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
        [outputs[n] for n in order],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("cls", TRAINERS)
def test_a_weight_only_the_second_output_reads_is_one_line(cls):
    """Named in weights_to_train, it is refused; by default it is left out, with a warning
    (another head of the model), and the first output trains as it would alone."""
    with pytest.raises(OrtBenchError) as e:
        cls(_two_outputs("ba"), weights_to_train=["A", "B"], max_iter=1).fit(X, YREG)
    assert str(e.value) == (
        "weight 'A' does not reach the trained output 'b' (the first float output): leave "
        "it out of weights_to_train, or convert a model whose first float output is the one "
        "to train"
    )
    model = _two_outputs("ba")
    with pytest.warns(UserWarning, match=r"1 initializers do not reach the trained output 'b'"):
        default = cls(model, max_iter=2, shuffle=False).fit(X, YREG)
    named = cls(model, weights_to_train=["B"], max_iter=2, shuffle=False)
    named.fit(X, YREG)
    assert list(default.get_state()) == list(named.get_state()) == ["B"]
    np.testing.assert_array_equal(default.train_losses_, named.train_losses_)


def test_a_penalty_over_an_integer_initializer_is_one_line():
    with pytest.raises(OrtBenchError) as e:
        FullTrainer(_mlp(5), max_iter=1, penalty={"shape_tensor": {"l2": 0.1}}).fit(X, YREG)
    assert str(e.value) == (
        "penalty on 'shape_tensor': it is an initializer of type int64, a penalty applies to "
        "float32 weights"
    )


# -- the rows a reader gets are checked --------------------------------------------------

BAD_ROWS = [
    {"batch_size": 17, "seconds_per_step": math.inf},
    {"batch_size": 18, "seconds_per_step": 0.0},
    {"batch_size": 19, "seconds_per_step": -1.0},
    {"batch_size": 20, "seconds_per_step": math.nan},
    {"batch_size": 21, "dataset": None},
    {"batch_size": 22},
    {"batch_size": 22},
]
CELL22 = "contender=ort-fwbw, problem=mlp, dataset=make_regression, batch_size=22, device=cpu"
REASONS = [
    "seconds_per_step is inf: a time is a finite number > 0",
    "seconds_per_step is 0.0: a time is a finite number > 0",
    "seconds_per_step is -1.0: a time is a finite number > 0",
    "seconds_per_step None is not a number",  # NaN is written null
    "no dataset",
    f"the same cell as line 8 ({CELL22})",
    f"the same cell as line 7 ({CELL22})",
]


def test_compare_names_bad_rows_and_never_judges_them(tmp_path, capsys):
    base = _run_folder(tmp_path / "base", [{}, *({"batch_size": b} for b in (17, 18, 19, 20, 22))])
    head = _run_folder(tmp_path / "head", [{"seconds_per_step": 1.01e-3}, *BAD_ROWS])
    assert main(["compare", str(base), str(head)]) == 0
    out, err = capsys.readouterr()
    expected = [f"{head / RESULTS_JSONL} line {n}: {r}" for n, r in zip(range(2, 9), REASONS)]
    assert err.splitlines() == [f"ortbench: bad row left out: {line}" for line in expected]
    assert "\n".join(f"- {line}" for line in expected) in out
    assert "3 unchanged" in out and "batch_size=17" not in out.split("</summary>")[1]


def test_report_of_bad_rows_names_them_and_draws_the_rest(tmp_path, capsys):
    run = _run_folder(tmp_path / "run", [{}, *BAD_ROWS[:3], *BAD_ROWS[5:]])
    assert main(["report", str(run)]) == 0
    out, err = capsys.readouterr()
    reasons = [
        *REASONS[:3],
        f"the same cell as line 7 ({CELL22})",
        f"the same cell as line 6 ({CELL22})",
    ]
    assert err.splitlines() == [
        f"ortbench: bad row left out: {run / RESULTS_CSV} line {n}: {r}"
        for n, r in zip(range(3, 8), reasons)
    ]
    page = (run / "index.html").read_text()
    assert "seconds_per_step is inf: a time is a finite number &gt; 0" in page
    assert out.strip() == str(run / "index.html")


# -- command-line options given what they do not expect ----------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--batch-sizes", "abc"], "--batch-sizes must be integers, got abc"),
        (["bench", "--contenders", ""], None),
        (["bench", "--contenders", "nope"], "nope"),
        (["compare", "{folder}", "{folder}", "--out", "{folder}"], "it is a folder"),
        (["compare", "{text}", "{folder}"], "is not an asv result file"),
        (["compare", "{folder}", "{folder}", "--threshold", "0"], "--threshold must be > 0"),
        (["compare", "{folder}", "{folder}", "--warn", "0.2"], "--warn must be between 0 and"),
        (["profile", "ort-fwbw", "--min-fraction", "1"], "--min-fraction must be in [0, 1)"),
        (["report", "{text}"], "no run folder at"),
        (["profile", "ort-fwbw", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["profile", "ort-fwbw", "--model", "{text}"], None),
        (["profile", "ort-fwbw", "--model", "{folder}"], None),
        (["bench", "--model", "{text}", "--data", "{text}"], None),
    ],
)
def test_cli_options_given_the_wrong_thing_are_one_line(tmp_path, capsys, argv, message):
    folder = _run_folder(tmp_path / "run")
    text = tmp_path / "notes.json"
    text.write_text("not json at all")
    argv = [a.format(folder=folder, text=text) for a in argv]
    if "--out" not in argv and argv[0] in ("bench", "profile"):
        argv += ["--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ortbench: error: ") and len(err.splitlines()) == 1
    assert message is None or message in err
    assert "Traceback" not in err and "onnxruntime_src" not in err


# -- the public trainer API given what it does not expect --------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"batch_size": "10"},
        {"batch_size": 0},
        {"max_iter": 1.5},
        {"learning_rate": "sgd"},
        {"weights_to_train": []},
        {"weights_to_train": ["no-such-weight"]},
        {"device": ""},
        {"intra_op_threads": 0},
        {"model_onnx": "{folder}"},
        {"model_onnx": "{text}"},
        {"model_onnx": b""},
        {"model_onnx": None},
    ],
)
@pytest.mark.parametrize("cls", TRAINERS)
def test_trainer_parameters_of_the_wrong_kind_are_one_line(tmp_path, cls, params):
    text = tmp_path / "model.onnx"
    text.write_text("this is not a model")
    params = {
        k: v.format(folder=tmp_path, text=text) if isinstance(v, str) else v
        for k, v in params.items()
    }
    trainer = cls(**{"model_onnx": _mlp(5), "max_iter": 1, **params})
    with pytest.raises(OrtBenchError) as e:
        trainer.fit(X, YREG)
    assert len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize(
    "X_bad, y_bad",
    [
        (X[:0], YREG[:0]),
        (X[:, :3], YREG),
        (X, YREG[:10]),
        (X.astype(str), YREG),
        (X, np.full(len(X), np.nan, np.float32)),
        (X, None),
    ],
)
@pytest.mark.parametrize("cls", TRAINERS)
def test_data_of_the_wrong_kind_is_one_line(cls, X_bad, y_bad):
    with pytest.raises(OrtBenchError) as e:
        cls(_mlp(5), max_iter=1).fit(X_bad, y_bad)
    assert len(str(e.value).splitlines()) == 1
