"""Profilers against known workloads and real tools: call trees, py-spy SVGs, ORT profiles, HTML."""

from __future__ import annotations

import gc
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest

from ortbench.cli import main
from ortbench.profiling import ort_profile, pyspy
from ortbench.profiling.calltree import CallTree, profile_call, short_path
from ortbench.training import ForwardBackwardTrainer, LearningRateSGD
from ortbench.training.runtime import profiled_sessions


def leaf():
    return sum(range(200))


def shared():
    return leaf()


def branch_a():
    return shared()


def branch_b():
    return shared() + leaf()


def recurse(n):
    return 0 if n == 0 else recurse(n - 1)


def workload():
    for _ in range(3):
        branch_a()
    branch_b()
    recurse(4)


def lines_by_name(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        found.setdefault(line.split(" -- ")[0].strip(), []).append(line)
    return found


def numbers(line: str) -> tuple[int, int]:
    primitive, calls = line.split(" -- ")[1].split()
    return int(primitive), int(calls)


def test_call_tree_of_a_known_workload():
    tree = CallTree.from_stats(profile_call(workload))
    text = tree.to_text()
    lines = lines_by_name(text)
    assert text.splitlines()[0].startswith("workload")
    assert [numbers(x) for x in lines["branch_a"]] == [(3, 3)]
    # shared has two callers: referenced under each with that edge's calls, expanded once
    refs = [x for x in lines["shared"] if x.endswith("+++")]
    assert sorted(numbers(x) for x in refs) == [(1, 1), (3, 3)]
    section = [x for x in lines["shared"] if not x.endswith("+++")]
    assert len(section) == 1 and not section[0].startswith(" ") and numbers(section[0]) == (4, 4)
    # recursion: its own section, the self-call a reference, the tree finite
    assert numbers(next(x for x in lines["recurse"] if not x.startswith(" "))) == (1, 5)
    assert all(x.endswith("+++") for x in lines["recurse"] if x.startswith("        "))
    assert (
        "test_profiling.py" in text
        and short_path(str(Path(__file__).resolve())) == "tests/test_profiling.py"
    )
    for line in text.splitlines():  # the tutorial's layout
        assert line.split(" -- ")[0].endswith(" ") or len(line.split(" -- ")[0]) > 60


def assert_cumulative_bounds(node: dict) -> None:
    # a recursive self-call's time is already inside the parent's: leave that edge out
    children = [c for c in node["children"] if c["where"] != node["where"]]
    assert node["cumulative"] + 1e-6 >= sum(c["cumulative"] for c in children)
    for child in children:
        assert_cumulative_bounds(child)


def test_call_tree_of_a_trainer_fit(regression, mlp_onnx):
    X, y = regression
    model = ForwardBackwardTrainer(mlp_onnx, learning_rate=LearningRateSGD(1e-3), max_iter=2)
    tree = CallTree.from_stats(profile_call(lambda: model.fit(X, y)))
    root = tree.to_json()["root"]
    fits = [c for c in root["children"] if c["name"] == "fit"]
    assert len(fits) == 1 and fits[0]["calls"] == 1
    assert fits[0]["where"].startswith("ortbench/training/base.py:")
    # the main tree; sections of mutually recursive functions (sklearn's clone) carry
    # cProfile's own double counting of re-entered calls on their edges
    assert_cumulative_bounds(root)
    assert any(
        "_run_epoch" in line and " 2 " in line.split(" -- ")[1]
        for line in tree.to_text().splitlines()
    )


@pytest.mark.training_build
def test_operator_table_of_a_profiled_trainer(regression, mlp_onnx, tmp_path):
    X, y = regression
    with profiled_sessions(tmp_path):
        model = ForwardBackwardTrainer(mlp_onnx, batch_size=20, max_iter=2, shuffle=False)
        model.fit(X, y)
        del model
        gc.collect()
    files = sorted(tmp_path.glob("*.json"))
    labels = {ort_profile.session_label(f) for f in files}
    assert {"ForwardBackwardTrainer_agent", "ForwardBackwardTrainer_update"} <= labels
    steps = 2 * len(X) // 20
    runs = ort_profile.run_times(files)
    assert len(runs["ForwardBackwardTrainer_agent"]) == 2 * steps  # forward and backward
    assert len(runs["ForwardBackwardTrainer_update"]) == steps
    skip = {"ForwardBackwardTrainer_update": steps // 2}
    table = ort_profile.operator_table(files, skip)
    products = table[table.op_type.isin(["MatMul", "Gemm", "FusedMatMul"])]
    assert len(products) and not table.node.str.contains("fence").any()
    agent = products[products.session == "ForwardBackwardTrainer_agent"]
    assert (agent.calls == steps).all()  # one per forward (or backward) run
    update = table[table.session == "ForwardBackwardTrainer_update"]
    assert (update.calls == steps - steps // 2).all()  # the window skipped the first half
    assert table.share.sum() == pytest.approx(1.0)


def test_py_spy_flame_graph_names_ortbench_functions(tmp_path):
    if pyspy.find_py_spy() is None:
        pytest.skip("py-spy is not installed")
    status = tmp_path / "status"
    script = tmp_path / "work.py"
    script.write_text(
        "import sys\n"
        "from ortbench.profiling.calltree import short_path\n"
        "def spin_in_ortbench():\n"
        "    for _ in range(400000):\n"
        "        short_path('site-packages/x.py')\n"
        "spin_in_ortbench()\n"
        f"open({str(status)!r}, 'w').write('ok')\n"
    )
    import sys

    problem = pyspy.record([sys.executable, str(script)], tmp_path, status)
    assert problem is None, problem
    svg = ElementTree.parse(tmp_path / "flamegraph.svg").getroot()
    assert svg.tag.endswith("svg")
    text = " ".join(svg.itertext())
    assert "spin_in_ortbench" in text and "short_path" in text
    assert (tmp_path / "profile.speedscope.json").stat().st_size > 0


def test_py_spy_failures_are_one_line(tmp_path):
    status = tmp_path / "status"
    reason = pyspy.record(["true"], tmp_path, status, py_spy=str(tmp_path / "no-py-spy"))
    assert reason.startswith("py-spy could not run") and "\n" not in reason
    if pyspy.find_py_spy() is not None:  # the profiled command fails: said, not hidden
        reason = pyspy.record(["false"], tmp_path, status)
        assert reason.startswith("the profiled run did not finish") and "\n" not in reason


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("src", "href"):
            if attrs.get(name):
                self.targets.append(attrs[name])


@pytest.mark.training_build
def test_profile_command_and_self_contained_report(tmp_path, capsys):
    status = main(
        ["profile", "ort-fwbw", "--batch-size", "15", "--epochs", "1", "--out", str(tmp_path)]
    )
    assert status == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    folder = run / "profile-ort-fwbw"
    for name in ("calltree.txt", "calltree.json", "hotspots.md", "steps.md", "operators.csv"):
        assert (folder / name).stat().st_size > 0, name
    assert "| forward |" in (folder / "steps.md").read_text()
    assert any(op in (folder / "operators.md").read_text() for op in ("MatMul", "Gemm"))
    page = (run / "index.html").read_text()
    parser = _Links()
    parser.feed(page)
    assert parser.targets, "the page links its files"
    for target in parser.targets:
        assert "://" not in target and not target.startswith("/"), target
        assert (run / target).is_file(), target
    assert "flamegraph.svg" in page or "py-spy:" in (folder / "profile.md").read_text()


def test_report_of_a_bench_run(tmp_path):
    assert main(["bench", "--quick", "--repeat", "2", "--epochs", "1", "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (run / "index.html").unlink()
    assert main(["report", str(run)]) == 0
    parser = _Links()
    parser.feed((run / "index.html").read_text())
    images = [t for t in parser.targets if t.endswith(".png")]
    assert len(images) >= 3
    for target in parser.targets:
        assert (run / target).is_file(), target
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_profile_rejects_bad_input(capsys):
    assert main(["profile", "nope"]) == 2
    assert "unknown contender 'nope'" in capsys.readouterr().err
    assert main(["profile", "ort-fwbw", "--batch-size", "0"]) == 2


_ = np  # numpy is imported for fixtures' dtypes
