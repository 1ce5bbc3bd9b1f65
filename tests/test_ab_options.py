"""``ortbench ab`` honours the options it shares with ``bench``: both workers build and
time the model the options describe (the rows of both sides are checked against a
reference computed here), and an option it cannot honour is refused in one line."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from sklearn.model_selection import train_test_split
from test_user_model import W2, numpy_forward, tanh_network

from ortbench.bench.ab import AB_THRESHOLD, AB_WARN
from ortbench.bench.datasets import VALIDATION_FRACTION
from ortbench.bench.problems import make_problem
from ortbench.bench.store import read_records
from ortbench.cli import main
from ortbench.report.paired import ab_comparison
from ortbench.schema import BASE, HEAD, SIDE

ROOT = Path(__file__).resolve().parent.parent
#: One portable contender (any onnxruntime build), one small batch, the fewest rounds the
#: paired test accepts: a few seconds a run.
QUICK = ["--contenders", "ort-portable-fwbw", "--batch-sizes", "16", "--devices", "cpu"]
QUICK += ["--epochs", "1", "--repeat", "14"]


def run_ab(tmp_path: Path, *options: str) -> dict[tuple[str, str], dict]:
    """Run ``ab`` with this checkout on both sides; the rows by problem and side."""
    argv = ["ab", str(ROOT), str(ROOT), *QUICK, *options]
    status = main([*argv, "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")])
    (folder,) = (tmp_path / "out").iterdir()
    comparison = ab_comparison(folder, threshold=AB_THRESHOLD, warn=AB_WARN)
    assert status == (1 if comparison.failing else 0)  # the verdict decides
    rows = {(record["problem"], record[SIDE]): record for record in read_records(folder)}
    for row in rows.values():
        assert row["status"] == "ok", row["status"]
        assert row["seconds_per_step"] > 0
        # measured as bench measures it, where the kernel tells
        assert row["peak_memory_mb"] >= 0 or not Path("/proc/self/clear_refs").exists()
    return rows


def test_generated_data_of_the_asked_size_on_both_sides(tmp_path):
    """``--n-features``, ``--n-samples`` and ``--hidden``: one run, two problems."""
    options = ["--problem", "linear", "mlp", "--hidden", "6,3", "--n-features", "7"]
    rows = run_ab(tmp_path, *options, "--n-samples", "300")
    assert {(problem, side) for problem, side in rows} == {
        (problem, side) for problem in ("linear", "mlp-6-3") for side in (BASE, HEAD)
    }
    for (name, _), row in rows.items():
        sizes = [7, 1] if name == "linear" else [7, 6, 3, 1]
        assert row["trained_values"] == sum(a * b + b for a, b in itertools.pairwise(sizes))
        # the reference: scikit-learn's prediction with the initial weights on that data
        data = make_problem(name, "make_regression", n_samples=300, n_features=7).data
        assert data.X_train.shape == (240, 7)
        output = make_problem(name, n_samples=300, n_features=7).reference.predict(data.X_train)
        expected = 0.5 * np.mean((output - data.y_train) ** 2)
        assert row["initial_loss"] == pytest.approx(expected, rel=1e-4)


@pytest.fixture(scope="module")
def user_files(tmp_path_factory) -> Path:
    """The hand-built tanh network of ``test_user_model`` and weighted data for it."""
    folder = tmp_path_factory.mktemp("ab-user")
    onnx.save(tanh_network(), folder / "model.onnx")
    rng = np.random.RandomState(2)
    X = rng.randn(240, 4).astype(np.float32)
    y = 2 * numpy_forward(X) + 1 + 0.1 * rng.randn(240)
    w = rng.uniform(0.2, 3, 240)
    table = pd.DataFrame(X, columns=["a", "b", "c", "d"]).assign(target=y, w=w)
    table.to_csv(folder / "data.csv", index=False)
    return folder


def initial_loss(folder: Path, loss: str, weighted: bool) -> float:
    """The loss of the model's own output on the training rows, in numpy."""
    table = pd.read_csv(folder / "data.csv")
    X, y, w = table[list("abcd")].to_numpy(np.float32), table.target.to_numpy(), table.w
    X, _, y, _, w, _ = train_test_split(
        X, y, w.to_numpy(), test_size=VALIDATION_FRACTION, random_state=0
    )
    error = numpy_forward(X) - y
    per_row = np.abs(error) if loss == "absolute_error" else 0.5 * error**2
    return float(np.average(per_row, weights=w if weighted else None))


#: Every option of a user's data, its loss and its trained initializers at once.
WEIGHTED_OPTIONS = ["--target", "target", "--sample-weight", "w", "--loss", "absolute_error"]
WEIGHTED_OPTIONS += ["--weights", "W2", "b2"]


def test_a_users_model_and_data_on_both_sides(tmp_path, user_files):
    """``--model``/``--data`` with ``--target``, ``--sample-weight``, ``--loss`` and
    ``--weights``, all in one run (each run starts two workers)."""
    files = ["--model", str(user_files / "model.onnx"), "--data", str(user_files / "data.csv")]
    rows = run_ab(tmp_path, *files, *WEIGHTED_OPTIONS)
    assert {side for _, side in rows} == {BASE, HEAD}
    expected = initial_loss(user_files, "absolute_error", weighted=True)
    for (problem, _), row in rows.items():
        assert problem == "model.onnx" and row["dataset"] == "data.csv"
        assert row["trained_values"] == W2.size + 1  # W2 and b2 only
        assert row["initial_loss"] == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("option", [["--keep-going"], ["--baseline", "ort-portable-fwbw"]])
def test_an_option_ab_cannot_honour_is_one_line(tmp_path, capsys, option):
    argv = ["ab", str(ROOT), str(ROOT), *QUICK, *option, "--out", str(tmp_path)]
    assert main([*argv, "--cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert f"{option[0]} is for bench only" in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_an_unusable_out_is_refused_before_the_checkouts(tmp_path, capsys, monkeypatch):
    """--out naming a file was refused after both refs' trees were exported into the
    cache."""
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.chdir(ROOT)
    argv = ["ab", "HEAD", "HEAD", *QUICK, "--out", str(afile)]
    assert main([*argv, "--cache", str(tmp_path / "cache")]) == 2
    assert f"cannot use --out {afile}: it is a file" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


def test_ab_help_leaves_out_the_options_it_refuses(capsys):
    assert main(["ab", "--help"]) == 0
    ab_help = capsys.readouterr().out
    assert main(["bench", "--help"]) == 0
    bench_help = capsys.readouterr().out
    for option in ("--keep-going", "--baseline"):
        assert option not in ab_help and option in bench_help, option
    assert "--contenders" in ab_help  # the options they share are listed


def test_the_time_budget_stops_the_extra_rounds_and_the_report_says_so(tmp_path, monkeypatch):
    """With every verdict held open, a budget spent before the first rounds end leaves
    each cell at --repeat rounds, and ``ab.md`` says why; without the budget, the same
    run times every cell up to --max-repeat. (Whether a real A/A cell stays open depends
    on the machine's noise: a busy machine can settle one early, so the rule is held
    open here; the rule has its own tests in ``test_ab``.)"""
    monkeypatch.setattr("ortbench.bench.ab.undecided", lambda *args: True)
    counts = {}
    for budget in ("0.01", "1000"):
        out = tmp_path / budget
        argv = ["ab", str(ROOT), str(ROOT), *QUICK]
        argv += ["--max-repeat", "18", "--time-budget", budget, "--out", str(out)]
        main([*argv, "--cache", str(tmp_path / "cache")])
        (folder,) = out.iterdir()
        counts[budget] = {len(r["seconds_per_step_samples"]) for r in read_records(folder)}
        report = (folder / "ab.md").read_text(encoding="utf-8")
        assert ("--time-budget) ended the extra rounds of" in report) == (budget < "1")
    assert counts == {"0.01": {14}, "1000": {18}}


def test_an_older_side_without_an_option_gets_the_options_it_knows(monkeypatch):
    """The worker's source is the coordinator's, the UserFiles the side's: a side from
    before --learning-rate builds the cell without it, or fails it saying why when given."""
    import dataclasses

    from ortbench.bench import ab_worker, user_model

    @dataclasses.dataclass(frozen=True)
    class OlderUserFiles:  # the side's, one option short
        model: str
        data: tuple
        target: str | None = None
        sample_weight: str | None = None
        weights: tuple | None = None
        loss: str | None = None

    built = []
    monkeypatch.setattr(user_model, "UserFiles", OlderUserFiles)
    monkeypatch.setattr(user_model, "load_user_problem", built.append)
    user = {"model": "m.onnx", "data": ["d.npz"]}
    user |= {option: None for option in user_model.OWN_OPTIONS}  # as this version sends it
    spec = {"user": user}
    ab_worker._problem(spec)
    assert built == [OlderUserFiles("m.onnx", ("d.npz",))]
    user["learning_rate"] = 0.1
    with pytest.raises(ValueError, match=r"^this side's ortbench has no --learning-rate option$"):
        ab_worker._problem(spec)
