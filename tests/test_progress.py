"""Progress of training and of a bench run: a bar on a terminal, one line per step otherwise."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import struct
import termios
from dataclasses import replace

import numpy as np
import pytest

from ortbench.bench import matrix
from ortbench.bench.ab import PairedCell, SideResult
from ortbench.bench.contenders import Contender
from ortbench.bench.matrix import BenchConfig, Cell, planned_stages, run_matrix
from ortbench.bench.store import ResultsWriter
from ortbench.cli import main
from ortbench.commands import bench
from ortbench.commands.ab import AbProgress
from ortbench.commands.bench import LINE_EVERY, RunProgress
from ortbench.progress import Progress
from ortbench.schema import SIDES
from ortbench.training import FullTrainer, LearningRateSGD


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_verbose_fit_writes_one_line_per_epoch(regression, mlp_onnx, capsys):
    X, y = regression
    model = FullTrainer(mlp_onnx, learning_rate=LearningRateSGD(1e-3), max_iter=3, verbose=1)
    model.fit(X, y)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 3
    for epoch, (line, loss) in enumerate(zip(lines, model.train_losses_), start=1):
        match = re.fullmatch(
            rf"\[FullTrainer\] epoch {epoch}/3 loss=(\S+) lr=0\.001 \((\d+\.\d)s(, about \d+s left)?\)",
            line,
        )
        assert match, line
        assert float(match.group(1)) == float(f"{loss:.6g}")
        assert (match.group(3) is None) == (epoch == 3)  # time left until the last epoch


def test_verbose_shows_the_rate_each_epoch_trained_at(regression, mlp_onnx, capsys):
    """invscaling: epoch 1 trains at eta0 and each next one at eta0 / (t + 1) ** power_t
    of the samples seen before it (the line said the next epoch's rate)."""
    X, y = regression
    rate = LearningRateSGD(0.1, learning_rate="invscaling", power_t=0.5)
    FullTrainer(mlp_onnx, learning_rate=rate, max_iter=3, verbose=1).fit(X, y)
    shown = [
        float(re.search(r" lr=(\S+) ", x).group(1)) for x in capsys.readouterr().err.splitlines()
    ]
    expected = [0.1 / (len(X) * k + 1) ** 0.5 for k in range(3)]
    np.testing.assert_allclose(shown, expected, rtol=2e-3)  # printed with 3 digits


def test_progress_on_a_terminal_is_a_bar():
    stream = Terminal()
    progress = Progress(4, "FullTrainer", "epoch", stream=stream)
    for k in range(4):
        progress.step(f"loss={k}")
    text = stream.getvalue()
    assert "\r" in text and "4/4" in text and "loss=3" in text and "epoch" in text
    assert "[FullTrainer]" not in text  # not the line format


def test_progress_estimates_the_time_left():
    stream = io.StringIO()
    progress = Progress(4, "ortbench bench", "cell", stream=stream)
    for elapsed in (1.0, 2.0, 3.0, 4.0):
        progress.step("", elapsed)
    assert stream.getvalue().splitlines() == [
        "[ortbench bench] cell 1/4 (1.0s, about 3s left)",
        "[ortbench bench] cell 2/4 (2.0s, about 2s left)",
        "[ortbench bench] cell 3/4 (3.0s, about 1s left)",
        "[ortbench bench] cell 4/4 (4.0s)",
    ]


def test_lines_come_at_most_every_few_seconds_and_notes_at_once():
    stream = io.StringIO()
    progress = Progress(30, "ortbench bench", "stage", stream=stream, every=10)
    for elapsed in range(1, 31):
        progress.step(f"s{elapsed}", elapsed)
        if elapsed == 15:
            progress.note("a result", elapsed)
    assert stream.getvalue().splitlines() == [
        "[ortbench bench] stage 10/30 s10 (10.0s, about 20s left)",
        "[ortbench bench] a result (15.0s, about 15s left)",
        "[ortbench bench] stage 25/30 s25 (25.0s, about 5s left)",
    ]


def test_the_time_left_follows_steps_added_on_the_way():
    stream = io.StringIO()
    progress = Progress(4, "ortbench bench", "stage", stream=stream)
    progress.step("", 2.0, steps=2)
    progress.grow(2)
    progress.step("", 3.0)
    assert stream.getvalue().splitlines() == [
        "[ortbench bench] stage 2/4 (2.0s, about 2s left)",
        "[ortbench bench] stage 3/6 (3.0s, about 3s left)",
    ]


# -- a bench run, timed on a fake clock ---------------------------------------------------


class Clock:
    """Seconds that pass only when a contender trains."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Clocked(Contender):
    """A contender whose epochs take ``SECONDS`` on the class's ``clock``, and nothing else."""

    name = "clocked"
    SECONDS = 1.0
    clock = Clock()

    def _fit(self, epochs: int) -> list[float]:
        self._continue(epochs)
        return [1.0] * epochs

    def _continue(self, epochs: int) -> None:
        self.clock.now += epochs * self.SECONDS

    def time_fit(self, epochs: int) -> float:
        start = self.clock.now
        self.continue_fit(epochs)
        return self.clock.now - start

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.zeros(len(X))


class Slower(Clocked):
    name = "slower"
    SECONDS = 3.0


class Refused(Clocked):
    name = "refused"

    @classmethod
    def unavailable(cls, problem, batch_size, device) -> str:
        return "never runs"


#: Two groups of the same work: the true time left when the first one ends is its time.
TWO_GROUPS = BenchConfig(
    contenders=("clocked", "slower", "refused"), problems=("linear",), datasets=("diabetes",),
    batch_sizes=(16, 32), devices=("cpu",), epochs=1, repeat=3,
)  # fmt: skip


@pytest.fixture
def clocked(monkeypatch) -> Clock:
    """The fake contenders, on a new clock, timed without waiting for quiet."""
    clock = Clock()
    for contender in (Clocked, Slower, Refused):
        monkeypatch.setitem(matrix.CONTENDERS, contender.name, contender)
    monkeypatch.setattr(Clocked, "clock", clock)
    monkeypatch.setattr(matrix, "timed_fit", lambda c, epochs: (c.time_fit(epochs), False))
    return clock


def run_shown(config: BenchConfig, clock: Clock, stream: io.StringIO, tmp_path) -> RunProgress:
    shown = RunProgress(planned_stages(config), clock, stream)
    run_matrix(config, ResultsWriter(tmp_path), "clocked", shown.cell, stages=shown.stage)
    return shown


def test_a_bench_run_shows_its_groups_progress_and_a_steady_time_left(clocked, tmp_path):
    stream = io.StringIO()
    shown = run_shown(TWO_GROUPS, clocked, stream, tmp_path)
    lines = stream.getvalue().splitlines()
    assert all(line.startswith("[ortbench bench] ") for line in lines)
    # the stages of a group while it runs, a line at most every LINE_EVERY (10) seconds;
    # when the first group ends, the time left is the second one's (52 s), not what the 5
    # cells left would extrapolate from the first one's 3 (5 x 52 s)
    first, second = "linear/diabetes batch=16 cpu", "linear/diabetes batch=32 cpu"
    assert LINE_EVERY == 10
    assert [line.removeprefix("[ortbench bench] ") for line in lines] == [
        f"stage 6/18 {first}: slower long fits of 2 epochs (16.0s, about 32s left)",
        f"stage 7/18 {first}: round 1/3 (28.0s, about 44s left)",
        f"stage 8/18 {first}: round 2/3 (40.0s, about 50s left)",
        f"stage 9/18 {first}: round 3/3 (52.0s, about 52s left)",
        f"cell 1/6 clocked {first}: 43.5 ms per step (52.0s, about 52s left)",
        f"cell 2/6 slower {first}: 130 ms per step (52.0s, about 52s left)",
        f"cell 3/6 refused {first}: unavailable: never runs (52.0s, about 52s left)",
        f"stage 15/18 {second}: slower long fits of 2 epochs (68.0s, about 14s left)",
        f"stage 16/18 {second}: round 1/3 (80.0s, about 10s left)",
        f"stage 17/18 {second}: round 2/3 (92.0s, about 5s left)",
        f"stage 18/18 {second}: round 3/3 (104.0s)",
        f"cell 4/6 clocked {second}: 83.3 ms per step (104.0s)",
        f"cell 5/6 slower {second}: 250 ms per step (104.0s)",
        f"cell 6/6 refused {second}: unavailable: never runs (104.0s)",
    ]
    assert clocked.now == 104
    assert shown.progress.done == shown.progress.total == planned_stages(TWO_GROUPS)


def test_rounds_timed_again_add_stages(clocked, tmp_path, monkeypatch):
    verdicts = iter(["a stall"])  # the first check finds a cell unstable, the rest none
    monkeypatch.setattr(matrix, "unstable", lambda slopes: next(verdicts, None))
    stages = []
    config = replace(TWO_GROUPS, batch_sizes=(16,))
    run_matrix(config, ResultsWriter(tmp_path), "again", stages=stages.append)
    planned = planned_stages(config)  # 2 stages per contender, 3 rounds
    assert planned == 9
    # "refused" has no long fit to size: its first stage counts for both
    assert [s.done for s in stages] == [1, 2, 4, *range(5, 13)]
    assert [s.total for s in stages] == [9] * 8 + [12] * 3
    assert [s.text for s in stages[-4:]] == [
        "round 3/3",
        *(f"round timed again {k}/3" for k in (1, 2, 3)),
    ]
    assert {s.group for s in stages} == {"linear/diabetes batch=16 cpu"}


def test_a_bench_run_on_a_terminal_is_a_bar_with_the_cells_above(clocked, tmp_path):
    stream = Terminal()
    run_shown(TWO_GROUPS, clocked, stream, tmp_path)
    text = stream.getvalue()
    assert "\r" in text and "18/18" in text and "stage" in text
    assert re.search(r"\rcell 1/6 clocked linear/diabetes batch=16 cpu: [^\r]+ per step\n", text)
    assert "[ortbench bench]" not in text  # not the line format


def test_bench_prints_stages_before_cells(clocked, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "LINE_EVERY", 0.0)  # a line per stage: a real clock runs
    options = "--contenders clocked --problem linear --dataset diabetes --batch-sizes 16 32"
    options += " --epochs 1 --repeat 2"
    assert main(["bench", *options.split(), "--out", str(tmp_path)]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[ortbench bench]")]
    assert [re.sub(r": \S+ \S+ per step", ": ok", x.split(" (")[0]) for x in lines] == [
        "[ortbench bench] stage 1/8 linear/diabetes batch=16 cpu: clocked fitted",
        "[ortbench bench] stage 2/8 linear/diabetes batch=16 cpu: clocked long fits of 2 epochs",
        "[ortbench bench] stage 3/8 linear/diabetes batch=16 cpu: round 1/2",
        "[ortbench bench] stage 4/8 linear/diabetes batch=16 cpu: round 2/2",
        "[ortbench bench] cell 1/2 clocked linear/diabetes batch=16 cpu: ok",
        "[ortbench bench] stage 5/8 linear/diabetes batch=32 cpu: clocked fitted",
        "[ortbench bench] stage 6/8 linear/diabetes batch=32 cpu: clocked long fits of 2 epochs",
        "[ortbench bench] stage 7/8 linear/diabetes batch=32 cpu: round 1/2",
        "[ortbench bench] stage 8/8 linear/diabetes batch=32 cpu: round 2/2",
        "[ortbench bench] cell 2/2 clocked linear/diabetes batch=32 cpu: ok",
    ]


def test_ab_tells_rounds_at_most_every_line_every_seconds_and_every_cell():
    """``ab``'s lines: every finished cell with both sides' figures, and between them the
    rounds of the group being measured, a line at most every LINE_EVERY seconds."""
    now = [0.0]
    stream = io.StringIO()
    shown = AbProgress(2, lambda: now[0], stream)
    for seconds in (4, 8, 12, 20, 23, 30):  # told at 4; 8 is too soon; 20 is 16 s on
        now[0] = seconds
        shown.note(f"group: round at {seconds}s")
    cell = Cell("ort-full", "mlp", "make_regression", 16, "cpu")
    sides = {name: SideResult({"status": "ok"}, samples=[2e-5]) for name in SIDES}
    shown.cell(1, 2, PairedCell(cell, sides))
    assert LINE_EVERY == 10
    assert [line.removeprefix("[ortbench ab] ") for line in stream.getvalue().splitlines()] == [
        "group: round at 4s (4.0s)",
        "group: round at 20s (20.0s)",
        "group: round at 30s (30.0s)",
        f"cell 1/2 {cell.label}: BASE 20 µs, HEAD 20 µs (30.0s, about 30s left)",
    ]


@pytest.mark.parametrize("columns", [0, 80])
def test_a_terminal_of_no_width_gets_lines_not_an_empty_bar(columns):
    """A pseudo-terminal nobody sized (``script``, some CI runners) says it is 0 columns
    wide: tqdm would draw nothing there, so the steps come as lines; sized, a bar."""
    reader, writer = pty.openpty()
    fcntl.ioctl(writer, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    with os.fdopen(writer, "w") as stream:
        progress = Progress(2, "FullTrainer", "epoch", stream=stream)
        for k in range(2):
            progress.step(f"loss={k}")
        stream.flush()
        chunks = []  # a pty hands over what was written in pieces: read until it is quiet
        while select.select([reader], [], [], 0.5)[0]:
            chunks.append(os.read(reader, 65536))
        text = b"".join(chunks).decode()
    os.close(reader)
    if columns:
        assert "2/2" in text and "\r" in text and "[FullTrainer]" not in text
    else:
        assert "[FullTrainer] epoch 2/2 loss=1" in text
