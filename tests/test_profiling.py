"""Profilers against known workloads and real tools: call trees, py-spy SVGs, ORT profiles, HTML."""

from __future__ import annotations

import gc
import itertools
import json
import math
import re
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest

from ortbench.bench.contenders import CONTENDERS, make_contender
from ortbench.bench.matrix import QUICK
from ortbench.bench.problems import batch_data_sizes, make_problem
from ortbench.cli import main
from ortbench.profiling import ort_profile, pyspy
from ortbench.profiling.calltree import CallTree, profile_call, short_path
from ortbench.profiling.driver import MAX_EPOCHS, MIN_EPOCHS, WINDOW_SECONDS, steady_epochs
from ortbench.profiling.hotspots import hotspots_markdown
from ortbench.profiling.steps import ORDER, PHASES, steps_markdown
from ortbench.report.plots import coinciding
from ortbench.report.profile_page import calltree_html
from ortbench.report.units import round_to_noise
from ortbench.schema import MIN_FLAME_SAMPLES
from ortbench.training import ForwardBackwardTrainer, FullTrainer, LearningRateSGD
from ortbench.training.runtime import sessions
from ortbench.training.runtime.sessions import profiled_sessions


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


def wheres(node: dict) -> set[str]:
    return {node["where"]}.union(*(wheres(c) for c in node["children"]))


def assert_cumulative_bounds(node: dict, path: frozenset = frozenset()) -> None:
    # a call that re-enters a function of the path (direct or mutual recursion) has its
    # time already inside an ancestor's, and cProfile counts it again on its edges: the
    # bound holds where the subtree re-enters nothing of the path
    path = path | {node["where"]}
    children = [c for c in node["children"] if c["where"] not in path]
    # cProfile's edge times of tiny calls (a comprehension's own frame in Python 3.11) can
    # be off by tens of microseconds: 0.1 ms of slack
    if not any(wheres(c) & path for c in children):
        assert node["cumulative"] + 1e-4 >= sum(c["cumulative"] for c in children), (
            node["where"],
            [(c["where"], c["cumulative"], c["calls"]) for c in children],
        )
    for child in children:
        assert_cumulative_bounds(child, path)


def test_call_tree_of_a_trainer_fit(regression, mlp_onnx):
    X, y = regression
    model = ForwardBackwardTrainer(mlp_onnx, learning_rate=LearningRateSGD(1e-3), max_iter=2)
    tree = CallTree.from_stats(profile_call(lambda: model.fit(X, y)))
    root = tree.to_json()["root"]
    fits = [c for c in root["children"] if c["name"] == "fit"]
    assert len(fits) == 1 and fits[0]["calls"] == 1
    assert fits[0]["where"].startswith("ortbench/training/estimators/fit_loop.py:")
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


def test_an_epoch_loop_is_one_run_per_epoch(regression, mlp_onnx, tmp_path):
    """The Scan's body runs as a graph of its own, one event per iteration inside the
    epoch's run: onnxruntime's real profile of the loop has one run per epoch."""
    X, y = regression
    with profiled_sessions(tmp_path):
        model = FullTrainer(
            mlp_onnx, batch_size=20, max_iter=3, backend="portable", epoch_loop=True
        )
        model.fit(X, y)
        del model
        gc.collect()
    (trace,) = tmp_path.glob("FullTrainer_epoch_loop*.json")
    runs = ort_profile.run_times([trace])["FullTrainer_epoch_loop"]
    assert len(runs) == 3
    nested = [e for e in ort_profile.load_events(trace) if e.get("name") == ort_profile.RUN_EVENT]
    per_epoch = len(X) // 20
    assert len(nested) == 3 * (1 + per_epoch)  # each epoch's run, then each step's body
    # a window of the last two epochs
    text = steps_markdown({"FullTrainer_epoch_loop": runs[1:]}, 2 * per_epoch, 1e6, 1.0)
    assert f", {1 / per_epoch:.3g} onnxruntime runs per step" in text
    one = steps_markdown({"FullTrainer_epoch_loop": runs[1:]}, 2, 1e6, 1.0)
    assert "2 steps after warm-up, 1 onnxruntime run per step." in one
    # the Scan's row holds its own time: no node time is counted twice
    table = ort_profile.operator_table([trace], {"FullTrainer_epoch_loop": 1})
    assert table.total_us.sum() <= sum(runs[1:])
    (scan,) = table[table.op_type == "Scan"].itertuples()
    assert scan.calls == 2 and scan.total_us > 0
    assert (table[table.op_type == "Gemm"].calls == 2 * per_epoch).all()


PROTOCOL_SCRIPT = """
import sys
from ortbench.profiling.driver import MAX_EPOCHS, MIN_EPOCHS, WINDOW_SECONDS, steady_epochs
from ortbench.profiling.calltree import short_path

def spin_while_building():
    for _ in range(300000):
        short_path('site-packages/x.py')

def spin_in_ortbench():
    for _ in range(400000):
        short_path('site-packages/x.py')

spin_while_building()
print('ready', flush=True)
sys.stdin.readline()
spin_in_ortbench()
print('done', flush=True)
"""


def test_py_spy_samples_only_the_part_after_ready(tmp_path):
    assert pyspy.find_py_spy() is not None, "py-spy is a runtime requirement"
    script = tmp_path / "work.py"
    script.write_text(PROTOCOL_SCRIPT)
    problem = pyspy.record([sys.executable, str(script)], tmp_path)
    assert problem is None, problem
    svg = ElementTree.parse(tmp_path / "flamegraph.svg").getroot()
    assert svg.tag.endswith("svg")
    text = " ".join(svg.itertext())
    assert "spin_in_ortbench" in text and "short_path" in text
    assert "spin_while_building" not in text  # sampling starts at "ready"
    assert str(tmp_path) not in text  # the title names no folder of this machine
    svg = tmp_path / "flamegraph.svg"
    assert pyspy.share_under(svg, "spin_in_ortbench") > 0.6
    assert pyspy.share_under(svg, "spin_while_building") == 0
    # the graph's own count, the one its root frame's title gives
    (total,) = re.findall(r"<title>all \((\d+) samples", svg.read_text())
    assert pyspy.samples(svg) == int(total) > 0


def test_py_spy_samples_a_run_that_waits(tmp_path):
    """A step that waits on another thread (JAX for its compiled computation) spends the
    step's time too: its samples are in the graph."""
    script = tmp_path / "wait.py"
    script.write_text(
        "import sys, threading\n"
        "def wait_for_the_step():\n"
        "    threading.Event().wait(2.0)\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "wait_for_the_step()\n"
        "print('done', flush=True)\n"
    )
    assert pyspy.record([sys.executable, str(script)], tmp_path) is None
    svg = tmp_path / "flamegraph.svg"
    assert pyspy.samples(svg) > 50  # of about 500 at 250 a second
    assert pyspy.share_under(svg, "wait_for_the_step") > 0.8


def write_flame_graph(path: Path, frames: list[tuple[str, int, int, int]]) -> Path:
    """A flame graph in py-spy's layout: one ``<g>`` per frame, its title the function and
    its rectangle's ``fg:x`` and ``fg:w`` the first sample and the samples it spans."""
    groups = "".join(
        f"<g><title>{name} (x.py:1) ({width} samples)</title><rect x='0' y='{16 * depth}' "
        f"width='1' height='15' fg:x='{start}' fg:w='{width}'/></g>"
        for name, depth, start, width in frames
    )
    path.write_text(
        "<svg xmlns='http://www.w3.org/2000/svg' xmlns:fg='http://github.com/jonhoo/inferno'>"
        f"<g id='frames'>{groups}</g></svg>"
    )
    return path


def test_share_under_a_function_counts_its_samples_once():
    """Samples 0-2 under ForwardBackwardTrainer._run_epoch, 3 under FullTrainer's, 4-5
    under BatchLoader.epoch, 6-9 elsewhere; a recursive function's nested frames count
    once."""
    frames = [
        ("all", 0, 0, 10),
        ("main", 1, 0, 10),
        ("BaseTrainer.fit", 2, 0, 6),
        ("ForwardBackwardTrainer._run_epoch", 3, 0, 3),
        ("run", 4, 0, 3),
        ("FullTrainer._run_epoch", 3, 3, 1),
        ("BatchLoader.epoch", 3, 4, 2),
        ("recurse", 2, 6, 3),
        ("recurse", 3, 6, 2),
        ("recurse", 4, 6, 1),
        ("import", 2, 9, 1),
    ]
    with tempfile.TemporaryDirectory() as folder:
        path = write_flame_graph(Path(folder) / "flamegraph.svg", frames)
        assert pyspy.samples(path) == 10
        assert pyspy.share_under(path, "_run_epoch") == pytest.approx(0.4)
        assert pyspy.share_under(path, "fit") == pytest.approx(0.6)
        assert pyspy.share_under(path, "epoch") == pytest.approx(0.2)  # not "_run_epoch"
        assert pyspy.share_under(path, "recurse") == pytest.approx(0.3)
        assert pyspy.share_under(path, "absent") == 0


def test_py_spy_failures_are_one_line(tmp_path):
    script = tmp_path / "work.py"
    script.write_text(PROTOCOL_SCRIPT)
    command = [sys.executable, str(script)]
    reason = pyspy.record(command, tmp_path, py_spy=str(tmp_path / "no-py-spy"))
    assert reason.startswith("py-spy could not run") and "\n" not in reason
    reason = pyspy.record(["false"], tmp_path)  # the run fails before its steady part
    assert reason.startswith("the profiled run failed") and "\n" not in reason
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nprint('ready', flush=True)\nsys.stdin.readline()\n1 / 0\n")
    reason = pyspy.record([sys.executable, str(crash)], tmp_path)
    assert reason.startswith("the profiled run did not finish") and "ZeroDivisionError" in reason


def markdown_rows(text: str, header: str) -> list[list[str]]:
    """The body rows of the markdown table whose header line starts with ``header``."""
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def percent(cell: str) -> float:
    return float(cell.rstrip("%")) / 100


def test_steps_split_synthetic_runs_into_phases():
    steps = 4
    # the agent runs forward then backward in one session, alternately
    # (the traces' order of sessions: the update's first)
    run_times = {
        "ForwardBackwardTrainer_update": [3.0, 5.0] * (steps // 2),
        "ForwardBackwardTrainer_agent": [10.0, 30.0] * steps,
        "ForwardBackwardTrainer_loss": [5.0] * steps,
        "some_other_session": [1000.0] * steps,  # not a trainer's phase: ignored
    }
    step_us = 60.0
    rows = markdown_rows(steps_markdown(run_times, steps, step_us, 50.0), "| phase |")
    table = {phase: (float(us), percent(share)) for phase, us, share in rows}
    expected = {
        "forward": 10.0,
        "backward": 30.0,
        "loss and its gradient": 5.0,
        "update (penalty fused)": 4.0,
        "outside onnxruntime": 60.0 - 10 - 30 - 5 - 4,
    }
    # the rows in the order a step runs them
    assert list(table) == [
        "forward",
        "loss and its gradient",
        "backward",
        "update (penalty fused)",
        "outside onnxruntime",
    ]
    assert set(table) == set(expected)
    for phase, us in expected.items():
        assert table[phase][0] == pytest.approx(us, abs=0.05), phase
        assert table[phase][1] == pytest.approx(us / step_us, abs=0.0005), phase


@pytest.mark.parametrize("name", [c for c in CONTENDERS if c.startswith("ort-")])
def test_every_session_of_a_step_has_its_phase(name, monkeypatch):
    """The sessions an engine contender runs in its steps (their labels, recorded as they
    are made) each map to a phase of steps.md: a session missing from PHASES would count
    its runs as time outside onnxruntime."""
    labels = []
    real = sessions.session_options

    def recorded(threads=None, label="session", spinning=True):
        labels.append(label)
        return real(threads, label, spinning)

    monkeypatch.setattr(sessions, "session_options", recorded)
    problem = make_problem("mlp", n_samples=200)
    reason = CONTENDERS[name].unavailable(problem, 16, "cpu")
    if reason:
        pytest.skip(reason)
    contender = make_contender(name, problem, 16, "cpu")
    contender.fit(1)
    contender.continue_fit(1)
    assert labels and set(labels) <= set(PHASES), labels
    # and each phase has its place in the table's order
    assert {phase for label in labels for phase in PHASES[label]} <= set(ORDER)


class FakeStats:
    """What hotspots_markdown reads of pstats.Stats: key -> (pc, nc, own, cumulative, callers)."""

    def __init__(self, own: dict):
        self.stats = {key: (1, calls, t, t, {}) for key, (calls, t) in own.items()}


def test_hotspots_attribute_own_time_to_packages():
    site = "/env/lib/python3.11/site-packages/"
    here = str(Path(__file__).resolve().parents[1] / "ortbench" / "training" / "base.py")
    own = {
        (here, 95, "fit"): (1, 4.0),
        (site + "numpy/_core/fromnumeric.py", 10, "take"): (7, 1.5),
        ("~", 0, "<method 'take' of 'numpy.ndarray' objects>"): (7, 0.5),
        (site + "onnxruntime/capi/onnxruntime_inference_collection.py", 1, "run"): (3, 1.0),
        ("~", 0, "<built-in method onnxruntime.capi.onnxruntime_pybind11_state.run_forward>"): (
            3,
            6.0,
        ),
        (site + "sklearn/base.py", 5, "clone"): (2, 2.0),
        ("/usr/lib/python3.11/json/decoder.py", 3, "decode"): (1, 1.0),
        ("~", 0, "<built-in method builtins.len>"): (9, 4.0),
        ("~", 0, "<method 'run_backward' of 'torch._C._EngineBase' objects>"): (2, 1.5),
        (site + "torch/optim/optimizer.py", 80, "wrapper"): (2, 0.5),
        (site + "jax/_src/array.py", 615, "_value"): (1, 1.0),
        (site + "jaxlib/xla_client.py", 1, "execute"): (1, 0.5),
    }
    text = hotspots_markdown(FakeStats(own), top=3)
    total = 23.5
    packages = {p: (float(t), percent(s)) for p, t, s in markdown_rows(text, "| package |")}
    expected = {
        "onnxruntime": 7.0,
        "ortbench": 4.0,
        "numpy": 2.0,
        "scikit-learn": 2.0,
        "torch": 2.0,
        "jax": 1.5,
        "python": 5.0,
    }
    assert set(packages) == set(expected)
    for package, seconds in expected.items():
        assert packages[package][0] == pytest.approx(seconds), package
        assert packages[package][1] == pytest.approx(seconds / total, abs=0.0005), package
    functions = markdown_rows(text, "| function |")
    assert [row[0] for row in functions] == [
        "`~:0:<built-in method onnxruntime.capi.onnxruntime_pybind11_state.run_forward>`",
        "`ortbench/training/base.py:95:fit`",
        "`~:0:<built-in method builtins.len>`",
    ]
    assert [row[1] for row in functions] == ["onnxruntime", "ortbench", "python"]
    assert [percent(row[4]) for row in functions] == pytest.approx(
        [6 / total, 4 / total, 4 / total], abs=0.0005
    )


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("src", "href", "data"):
            if attrs.get(name) and not attrs[name].startswith("data:"):  # inline: no file
                self.targets.append(attrs[name])


def profiled_run(tmp_path: Path, *options: str) -> Path:
    assert (
        main(["profile", "ort-fwbw", "--batch-size", "15", *options, "--out", str(tmp_path)]) == 0
    )
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return run


def headings(page: str) -> list[str]:
    return [re.sub("<[^>]+>", "", h) for h in re.findall(r"<h\d[^>]*>(.*?)</h\d>", page)]


@pytest.mark.training_build
def test_profile_covers_the_epoch_loop_and_the_page_shows_it(tmp_path):
    run = profiled_run(tmp_path, "--epochs", "150")
    folder = run / "profile-ort-fwbw"
    for name in ("calltree.txt", "calltree.json", "hotspots.md", "steps.md", "operators.csv"):
        assert (folder / name).stat().st_size > 0, name
    assert "| forward |" in (folder / "steps.md").read_text()
    assert any(op in (folder / "operators.md").read_text() for op in ("MatMul", "Gemm"))
    # the steady epochs and the build in separate trees
    steady, build = (
        (folder / "calltree.txt").read_text(),
        (folder / "calltree-build.txt").read_text(),
    )
    assert [numbers(x) for x in lines_by_name(steady)["_run_epoch"]] == [(150, 150)]
    assert "_build" not in lines_by_name(steady) and "_build" in lines_by_name(build)
    # the flame graph: the steady epochs, most samples under the epoch loop
    share = pyspy.share_under(folder / "flamegraph.svg", "_run_epoch")
    assert share >= 0.8, share
    assert pyspy.share_under(folder / "flamegraph.svg", "_build") == 0
    page = (run / "index.html").read_text()
    assert (
        "<object class='flamegraph' type='image/svg+xml' data='profile-ort-fwbw/flamegraph.svg'"
        in page
    )
    samples = pyspy.samples(folder / "flamegraph.svg")
    if samples >= MIN_FLAME_SAMPLES:  # else (a fast machine) the page says they are too few
        assert f"{share:.0%} of the {samples} samples are under" in page
    else:
        assert f"Only {samples} samples: too few to read" in page
    assert "the same steady window, 150 epochs after the build" in page
    titles = headings(page)
    assert not [a for a, b in itertools.pairwise(titles) if a == b], titles  # no doubled heading
    assert "<details open><summary" in page and "_run_epoch" in page
    parser = _Links()
    parser.feed(page)
    assert parser.targets, "the page links its files"
    for target in parser.targets:
        assert "://" not in target and not target.startswith("/"), target
        assert (run / target).is_file(), target


def test_the_window_holds_steps_only_where_the_fit_times_its_threads(tmp_path, monkeypatch):
    """At batch 256 the tutorial MLP's fused step is timed on one thread and on the pool
    over a few batches as the fit builds it: those runs are no steps, and the session left
    aside has the kept one's label. The window has one run per step and one per epoch
    (its losses), every phase within the step."""
    from ortbench.training.estimators.params import ONE_THREAD_WORK, TIMED_THREADS_WORK

    assert ONE_THREAD_WORK < 256 * 5571 < TIMED_THREADS_WORK  # the fit times both
    monkeypatch.setattr(pyspy, "find_py_spy", lambda: None)
    argv = ["profile", "ort-portable-full", "--batch-size", "256", "--epochs", "3"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    text = (run / "profile-ort-portable-full" / "steps.md").read_text()
    assert "24 steps after warm-up, 1.12 onnxruntime runs per step." in text
    shares = [float(x) for x in re.findall(r"\| ([\d.]+)% \|", text)]
    assert len(shares) == 3 and sum(shares) == pytest.approx(100, abs=0.2), text


def test_a_flame_graph_of_a_few_samples_says_so(tmp_path):
    """One epoch of the tutorial MLP lasts a few milliseconds: py-spy's graph of it holds
    a handful of samples, and the notes and the page say it is too coarse to read."""
    argv = ["profile", "ort-portable-full", "--batch-size", "15", "--epochs", "1"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    folder = run / "profile-ort-portable-full"
    count = pyspy.samples(folder / "flamegraph.svg")
    assert count < MIN_FLAME_SAMPLES
    assert f"only {count} sample" in (folder / "profile.md").read_text()
    page = (run / "index.html").read_text()
    assert f"Only {count} sample" in page and "too few to read" in page
    # with enough samples, a contender outside the engine's trainers gets their count
    info = json.loads((folder / "profile.json").read_text())
    info.update(flamegraph_samples=900, epoch_loop_share=None)
    (folder / "profile.json").write_text(json.dumps(info))
    assert main(["report", str(run)]) == 0
    assert "<p>900 samples. Click a frame" in (run / "index.html").read_text()


def test_a_contender_without_onnxruntime_sessions_is_not_said_to_have_them(tmp_path, monkeypatch):
    monkeypatch.setattr(pyspy, "find_py_spy", lambda: None)
    for name in ["sklearn-mlp-sgd", "ort-portable-full"]:
        argv = ["profile", name, "--epochs", "1", "--out", str(tmp_path / name)]
        assert main(argv) == 0
        (run,) = (tmp_path / name).iterdir()
        page = (run / "index.html").read_text()
        said = "1 warm-up epoch, and onnxruntime's profiler its first epochs;" in page
        assert said == (name != "sklearn-mlp-sgd"), name
        assert "1 warm-up epoch; the build" in page or said, name
        steps = (run / f"profile-{name}" / "steps.md").read_text()
        assert ("runs no onnxruntime session" in steps) == (not said), name


@pytest.mark.training_build
def test_profile_page_says_why_there_is_no_flame_graph(tmp_path, monkeypatch):
    monkeypatch.setattr(pyspy, "find_py_spy", lambda: None)
    run = profiled_run(tmp_path, "--epochs", "1")
    assert not (run / "profile-ort-fwbw" / "flamegraph.svg").exists()
    page = (run / "index.html").read_text()
    assert "<strong>No flame graph:</strong> py-spy is not installed: pip install" in page
    assert "class='flamegraph'" not in page
    assert "the same steady window, 1 epoch after the build and 1 warm-up epoch," in page


@pytest.mark.training_build
def test_an_interrupted_profile_keeps_what_it_wrote(tmp_path, monkeypatch, capsys):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pyspy, "record", interrupt)
    argv = ["profile", "ort-fwbw", "--epochs", "1", "--out", str(tmp_path)]
    assert main(argv) == 130
    assert "interrupted: the profilers that finished are kept in" in capsys.readouterr().err
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert (run / "profile-ort-fwbw" / "calltree.txt").stat().st_size > 0
    assert "Where a step goes" in (run / "index.html").read_text()
    assert "No flame graph" in (run / "index.html").read_text()
    assert json.loads((run / "profile-ort-fwbw" / "profile.json").read_text())["interrupted"]
    assert main(["report", str(run)]) == 0  # a run folder like any other
    assert "<strong>Interrupted</strong> (Ctrl-C or SIGTERM)" in (run / "index.html").read_text()


def test_a_profile_stopped_by_sigterm_before_any_profiler_says_so(tmp_path):
    """SIGTERM while the first profiler runs: exit 130 (as Ctrl-C), and a folder that
    says it was interrupted, which ``ortbench report`` reads as any profile."""
    import subprocess

    command = [sys.executable, "-m", "ortbench", "profile", "ort-portable-full", "--epochs", "400"]
    run = subprocess.Popen(
        [*command, "--out", str(tmp_path)], stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    for line in run.stderr:
        if line.startswith("[2/4]"):  # cProfile over the build, then the steady epochs
            run.terminate()
            break
    rest = run.stderr.read()
    assert run.wait(60) == 130, rest
    assert "interrupted: the profilers that finished are kept in" in rest
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    profile = folder / "profile-ort-portable-full"
    assert json.loads((profile / "profile.json").read_text())["interrupted"]
    assert "Interrupted (Ctrl-C or SIGTERM)" in (profile / "profile.md").read_text()
    assert main(["report", str(folder)]) == 0
    assert "<strong>Interrupted</strong>" in (folder / "index.html").read_text()


def test_call_tree_page_nests_details_heaviest_first():
    tree = CallTree.from_stats(profile_call(workload)).to_json()
    page = calltree_html(tree)
    # one <details> per node with children, in the main tree and in the sections
    with_children = sum(
        1 for top in [tree["root"], *tree["sections"]] for n in walk(top) if n["children"]
    )
    assert page.count("<details") == with_children and page.count("</details>") == with_children
    names = [n.strip() for n in re.findall(r"<span class='name'>([^<]+)", page)]
    order = [n["name"] for n in walk(tree["root"])]  # depth first, children by time
    assert names[1 : len(order) + 1] == order  # after the header row
    for node in walk(tree["root"]):
        times = [c["cumulative"] for c in node["children"]]
        assert times == sorted(times, reverse=True)
    assert page.count("<details open>") >= 1 and "+++" in page


def walk(node: dict):
    yield node
    for child in sorted(node["children"], key=lambda c: -c["cumulative"]):
        yield from walk(child)


@pytest.mark.training_build
def test_report_of_a_bench_run(tmp_path, capsys):
    argv = ["bench", "--quick", "--repeat", "2", "--epochs", "1", "--keep-going"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    lines = capsys.readouterr().err.splitlines()
    progress = [x for x in lines if x.startswith("[ortbench bench] cell ")]
    cells = len(QUICK.contenders) * len(QUICK.batch_sizes)
    assert len(progress) == cells and "\r" not in "".join(lines)  # one line per cell
    # the first group's cells leave the second group's stages
    assert all(re.search(r"s left\)$", x) for x in progress[: len(QUICK.contenders)]), progress
    last = f"[ortbench bench] cell {cells}/{cells} {QUICK.contenders[-1]} mlp/"
    assert progress[-1].startswith(last)
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


def test_short_paths_name_no_folder_of_the_machine():
    assert (
        short_path(json.__file__)
        == f"python{sys.version_info[0]}.{sys.version_info[1]}/json/__init__.py"
    )


def test_steady_epochs_fill_the_window():
    assert steady_epochs(0.0015) == math.ceil(WINDOW_SECONDS / 0.0015)  # fast epochs: many
    assert steady_epochs(WINDOW_SECONDS / 10) == 10
    assert steady_epochs(10.0) == MIN_EPOCHS and steady_epochs(1e-9) == MAX_EPOCHS


def test_round_to_noise():
    assert [round_to_noise(152.34, noise) for noise in (12, 0.3, 0.03, 400)] == [
        "150",
        "152",
        "152",
        "150",
    ]
    assert round_to_noise(1.2345, 0.01) == "1.23"
    assert round_to_noise(27_200.0, 14_000.0) == "27000"  # 2 digits even when noisier
    assert round_to_noise(0.00123, math.nan) == "0.00123" and round_to_noise(math.nan, 1) == ""


def test_coinciding_curves_are_named():
    a = np.array([1.0, 0.5, 0.25])
    same = coinciding({"sklearn": a, "full": a * (1 + 1e-5), "fwbw": a.copy(), "nesterov": a / 2})
    assert same == {"full": "sklearn", "fwbw": "sklearn"}
    assert coinciding({"x": a, "y": a[:2]}) == {}


def test_a_profile_grows_generated_data_to_eight_full_batches(tmp_path, monkeypatch):
    """At batch 128 the 800 training rows of make_regression would be 6.25 batches, the
    last one padded: the profile grows the data set as the bench does, to 8 full ones."""
    monkeypatch.setattr(pyspy, "find_py_spy", lambda: None)
    argv = ["profile", "ort-portable-full", "--batch-size", "128", "--epochs", "1"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    notes = (run / "profile-ort-portable-full" / "profile.md").read_text()
    assert "make_regression (1024 training rows), batch size 128" in notes
    assert "1 epoch of 8 steps" in notes
    page = (run / "index.html").read_text()
    assert "make_regression (1024 training rows), batch size 128" in page


@pytest.mark.parametrize(
    ("dataset", "batch_size", "rows"),
    [("make_regression", 16, 800), ("make_regression", 256, 2048), ("diabetes", 64, 353)],
)
def test_data_grow_to_eight_full_batches_where_they_are_generated(dataset, batch_size, rows):
    sizes = batch_data_sizes("mlp", dataset, batch_size)
    assert len(make_problem("mlp", dataset, **sizes).data.X_train) == rows


@pytest.mark.parametrize("command", ["profile", "bench"])
def test_a_batch_too_large_for_memory_is_one_line(command, tmp_path, capsys):
    """Generated data grow to 8 batches: at a batch of 10^8 rows they would need more than
    any machine's memory, which the error says before allocating anything."""
    option = "--batch-size" if command == "profile" else "--batch-sizes"
    argv = [command, *(["ort-portable-full"] if command == "profile" else [])]
    argv += [option, "100000000", "--out", str(tmp_path)]
    if command == "bench":
        argv += ["--contenders", "ort-portable-full"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert err[-1].startswith("ortbench: error: make_regression of 1000000000 rows")
    assert "lower the batch size" in err[-1]
