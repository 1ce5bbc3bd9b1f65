"""``ortbench ab``: the coordinator's order of fits and pairing (on fake sides, no timing),
the paired test on synthetic drifting samples, the sides' environments, the command."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ortbench.bench.ab import (
    AB_REPEAT,
    AB_THRESHOLD,
    AB_WARN,
    EXTRA_ROUNDS,
    Sequential,
    TimeBudget,
    Worker,
    alternation,
    run_ab,
    run_pair_group,
    started,
)
from ortbench.bench.checkouts import Checkout, mismatched_pins
from ortbench.bench.machine import machine, versions
from ortbench.bench.matrix import BenchConfig
from ortbench.bench.store import COLUMNS, KEYS, ResultsWriter, read_records, write_plan
from ortbench.bench.timing import MIN_EXTRA_SECONDS, SHORT_EPOCHS
from ortbench.cli import main
from ortbench.report.paired import (
    ALPHA,
    ab_comparison,
    ab_markdown,
    adjusted,
    block_ratios,
    median_interval,
    paired_test,
    paired_verdict,
    undecided,
)
from ortbench.report.verdicts import IMPROVED, REGRESSED, UNCHANGED
from ortbench.schema import BASE, HEAD, SIDE, SIDES
from ortbench.training import OrtBenchError

ROOT = Path(__file__).resolve().parent.parent
CONFIG = BenchConfig(
    contenders=("ort-full", "ort-fwbw"),
    problems=("mlp",),
    batch_sizes=(15,),
    devices=("cpu",),
    epochs=2,
    repeat=AB_REPEAT,
)
CONTEXT = versions() | machine()


class FakeSide:
    """A side that fits nothing: it logs each request on a shared clock and answers, for
    a fit of ``epochs`` epochs of 10 steps, a fixed cost of 1 ms plus 0.1 ms a step, times
    ``factor``, times a drift of the machine that grows geometrically with the number of
    rounds (short and long fits) timed so far."""

    def __init__(self, name: str, log: list, factor: float, ortvalues: int = 0, drift=1.05):
        self.name, self.log, self.factor = name, log, factor
        self.ortvalues, self.drift = ortvalues, drift
        self.context = CONTEXT

    def request(self, command: str, **fields) -> dict:
        self.log.append((command, self.name, fields.get("key"), fields.get("epochs")))
        if command == "prepare":
            steps = 10 * fields["epochs"]
            return {"steps": steps, "status": "ok", "initial_loss": 1.0, "final_train_loss": 0.5}
        if command == "time":
            clock = (sum(entry[0] == "time" for entry in self.log) - 1) // 8  # 8 fits a round
            seconds = 1e-3 + 1e-4 * 10 * fields["epochs"]
            return {"seconds": self.factor * seconds * self.drift**clock}
        return {"loss_curve": [0.7, 0.5], "runs_per_step": 2, "ortvalues_per_step": self.ortvalues}


def fake_run(folder: Path, head_factor: float, head_ortvalues: int = 0) -> list:
    log: list = []
    sides = {
        BASE: FakeSide(BASE, log, 1.0),
        HEAD: FakeSide(HEAD, log, head_factor, head_ortvalues),
    }
    run_ab(CONFIG, sides, ResultsWriter(folder, keys=[*KEYS, SIDE]), "run")
    return log


def test_timed_fits_alternate_a_b_b_a_within_each_cell(tmp_path):
    log = fake_run(tmp_path, 1.0)
    commands = [entry[0] for entry in log]
    # every cell is prepared on both sides before any timing, finished after all of it;
    # each round is a short and a long fit of each cell on each side
    sizing = commands.count("time") - 8 * AB_REPEAT
    assert commands == ["prepare"] * 4 + ["time"] * (sizing + 8 * AB_REPEAT) + ["finish"] * 4
    timed = [(side, key.split()[0], epochs) for command, side, key, epochs in log[4:-4]]
    sized, timed = timed[:sizing], timed[sizing:]
    # a short fit lasts 2 ms: each cell's long one was grown until it lasted 50 ms more on
    # both sides (1 ms an epoch, times the drift), then timed at that length
    short = SHORT_EPOCHS
    for contender in CONFIG.contenders:
        fits = [(s, epochs) for s, name, epochs in sized if name == contender]
        assert fits[:2] == [(BASE, short), (HEAD, short)] and fits[-1][0] == HEAD
        long = fits[-1][1]
        assert 1e-3 * (long - short) >= MIN_EXTRA_SECONDS
        mine = [epochs for _, name, epochs in timed if name == contender]
        assert mine == ([short] * 2 + [long] * 2) * AB_REPEAT
        for length in (short, long):
            sides = [s for s, name, epochs in timed if name == contender and epochs == length]
            assert sides == [BASE, HEAD, HEAD, BASE] * (AB_REPEAT // 2)
    # the contenders of a group take turns within each round
    assert [name for _, name, _ in timed[:8]] == ["ort-full"] * 2 + ["ort-fwbw"] * 2 + [
        "ort-full"
    ] * 2 + ["ort-fwbw"] * 2
    records = read_records(tmp_path)
    assert sorted((r["contender"], r[SIDE]) for r in records) == sorted(
        (c, s) for c in CONFIG.contenders for s in (BASE, HEAD)
    )
    for record in records:
        assert len(record["seconds_per_step_samples"]) == AB_REPEAT
        # each side holds every other place of its cell's order of fits
        assert len(set(record["fit_positions"])) == AB_REPEAT


def test_a_signal_after_the_last_cell_leaves_the_verdict(tmp_path):
    """plan.json marked interrupted with every planned cell measured (the signal came
    while the run wrote its files): ab.md gives its verdict; one cell short, it does not."""
    fake_run(tmp_path, 2.0)
    cells = [{k: r[k] for k in KEYS} for r in read_records(tmp_path) if r[SIDE] == BASE]
    write_plan(tmp_path, cells, interrupted=True)
    comparison = ab_comparison(tmp_path)
    assert not comparison.interrupted and comparison.not_run == []
    assert "Interrupted" not in ab_markdown(comparison).splitlines()[0]
    write_plan(tmp_path, [*cells, {**cells[0], "batch_size": 64}], interrupted=True)
    comparison = ab_comparison(tmp_path)
    assert comparison.interrupted and len(comparison.not_run) == 1
    assert (
        ab_markdown(comparison)
        .splitlines()[0]
        .startswith("## A/B benchmarks: Interrupted, 1 cell not run")
    )


def test_pairing_cancels_a_drift_of_the_machine(tmp_path):
    """Times grow 5% with every round: over the run the machine slows several times."""
    fake_run(tmp_path / "ab", 2.0)
    comparison = ab_comparison(tmp_path / "ab")
    times = [v for v in comparison.verdicts if v.benchmark == "seconds_per_step"]
    assert [v.verdict for v in times] == [REGRESSED, REGRESSED]
    for v in times:
        assert v.ratio == pytest.approx(2.0, rel=1e-9)
    records = read_records(tmp_path / "ab")
    # the slope removes the 1 ms a fit pays once: 0.1 ms a step in BASE's first round,
    # times the drift of the fits that sized the long one
    assert 1e-4 <= min(records[0]["seconds_per_step_samples"]) < 1.2e-4
    assert records[0]["seconds_per_fit_overhead"] > 1e-3
    fake_run(tmp_path / "aa", 1.0)
    comparison = ab_comparison(tmp_path / "aa")
    assert {v.verdict for v in comparison.verdicts} == {UNCHANGED}
    assert not comparison.failing


def test_a_worker_whose_wait_for_quiet_gave_up_is_in_the_row(tmp_path):
    gave_up = []

    class Restless(FakeSide):
        def request(self, command: str, **fields) -> dict:
            reply = super().request(command, **fields)
            if command == "time" and fields["key"].startswith("ort-fwbw"):
                reply["quiet_wait_gave_up"] = fields["epochs"] == SHORT_EPOCHS
                gave_up.append(reply["quiet_wait_gave_up"])
            return reply

    log: list = []
    sides = {BASE: FakeSide(BASE, log, 1.0), HEAD: Restless(HEAD, log, 1.0)}
    run_ab(CONFIG, sides, ResultsWriter(tmp_path, keys=[*KEYS, SIDE]), "run")
    timing = {(r["contender"], r[SIDE]): r["timing"] for r in read_records(tmp_path)}
    # every short fit of HEAD's ort-fwbw, the sizing ones included
    assert sum(gave_up) > AB_REPEAT
    expected = f"; quiet wait gave up after {sum(gave_up)} fits (1 s each)"
    assert timing["ort-fwbw", HEAD].endswith(expected)
    assert "quiet" not in timing["ort-fwbw", BASE] + timing["ort-full", HEAD]


def test_counters_are_exact_and_come_first(tmp_path):
    fake_run(tmp_path, 1.0, head_ortvalues=1)
    comparison = ab_comparison(tmp_path)
    flagged = [(v.benchmark, v.verdict) for v in comparison.verdicts if v.verdict != UNCHANGED]
    assert flagged == [("ortvalues_per_step", REGRESSED)] * 2
    assert comparison.failing
    report = ab_markdown(comparison)
    assert report.index("ortvalues_per_step") < report.index("seconds_per_step")
    assert report.startswith("## A/B benchmarks: Regressions found")


class Wobbly(FakeSide):
    """A HEAD side ``factor`` times slower than BASE, whose fits of each cell last
    ``low`` or ``high`` times that, four fits each in turn: its block ratios fall on
    both sides of ``factor``, however many blocks are timed."""

    def __init__(self, name: str, log: list, factor: float, spread: float):
        super().__init__(name, log, factor)
        self.low, self.high = factor / spread, factor * spread
        self.counts: Counter = Counter()

    def request(self, command: str, **fields) -> dict:
        reply = super().request(command, **fields)
        if command == "time":
            turn = self.counts[fields["key"]] // 4 % 2
            self.counts[fields["key"]] += 1
            reply["seconds"] *= (self.low, self.high)[turn] / self.factor
        return reply


@pytest.mark.parametrize(
    ("factor", "rounds"),
    [(1.10, 3 * AB_REPEAT), (1.0, AB_REPEAT), (1.5, AB_REPEAT), (1 / 1.10, AB_REPEAT)],
)
def test_cells_whose_verdict_is_open_are_timed_further(tmp_path, factor, rounds):
    """HEAD around the threshold (block ratios on both sides of 1.10): the median's
    interval holds it however many blocks are timed, so the cells run to the budget;
    clearly under or over it, they stop at --repeat, and so does a cell around the
    threshold of an improvement (a gate is for slowdowns). The further rounds keep the
    A B B A order."""
    log: list = []
    sides = {BASE: FakeSide(BASE, log, 1.0), HEAD: Wobbly(HEAD, log, factor, 1.04)}
    sequential = Sequential(0.10, 3 * AB_REPEAT)
    run_group = functools.partial(run_pair_group, sequential=sequential)
    run_ab(CONFIG, sides, ResultsWriter(tmp_path, keys=[*KEYS, SIDE]), "run", run_group=run_group)
    records = read_records(tmp_path)
    assert [len(r["seconds_per_step_samples"]) for r in records] == [rounds] * 4
    timed = [(side, key.split()[0], e) for command, side, key, e in log if command == "time"]
    for contender in CONFIG.contenders:
        mine = [(s, e) for s, name, e in timed if name == contender][-4 * rounds :]
        assert [s for s, e in mine if e == SHORT_EPOCHS] == [BASE, HEAD, HEAD, BASE] * (rounds // 2)
    verdicts = [v for v in ab_comparison(tmp_path).verdicts if v.benchmark == "seconds_per_step"]
    assert all(v.note.endswith(f", {rounds // 2} blocks") for v in verdicts), verdicts
    # around the threshold the cells reach the most rounds still open, and are counted
    assert sequential.capped == (len(CONFIG.contenders) if factor == 1.10 else 0)


def test_the_budget_need_not_be_a_whole_number_of_further_looks(tmp_path):
    log: list = []
    sides = {BASE: FakeSide(BASE, log, 1.0), HEAD: Wobbly(HEAD, log, 1.10, 1.04)}
    sequential = Sequential(0.10, AB_REPEAT + EXTRA_ROUNDS + 2)
    run_group = functools.partial(run_pair_group, sequential=sequential)
    run_ab(CONFIG, sides, ResultsWriter(tmp_path, keys=[*KEYS, SIDE]), "run", run_group=run_group)
    counts = {len(r["seconds_per_step_samples"]) for r in read_records(tmp_path)}
    assert counts == {AB_REPEAT + EXTRA_ROUNDS + 2}


def test_each_round_of_a_group_is_told_as_it_ends(tmp_path):
    """A group's cells finish together at its end: until then each round is told, the
    rounds added for an open verdict counted on from the first ones."""
    log, notes = [], []
    sides = {BASE: FakeSide(BASE, log, 1.0), HEAD: Wobbly(HEAD, log, 1.10, 1.04)}
    sequential = Sequential(0.10, AB_REPEAT + EXTRA_ROUNDS + 2)
    run_group = functools.partial(run_pair_group, sequential=sequential)
    writer = ResultsWriter(tmp_path, keys=[*KEYS, SIDE])
    run_ab(CONFIG, sides, writer, "run", run_group=run_group, note=notes.append)
    group = "mlp/make_regression batch=15 cpu"
    first = [f"{group}: round {k}/{AB_REPEAT}" for k in range(1, AB_REPEAT + 1)]
    more = AB_REPEAT + EXTRA_ROUNDS
    extra = [f"{group}: round {k}/{more}" for k in range(AB_REPEAT + 1, more + 1)]
    last = [f"{group}: round {k}/{more + 2}" for k in (more + 1, more + 2)]
    assert notes == first + extra + last


class Clocked(Wobbly):
    """A :class:`Wobbly` side whose every timed fit moves ``clock`` one second on."""

    def __init__(self, name: str, log: list, factor: float, spread: float, clock: list):
        super().__init__(name, log, factor, spread)
        self.clock = clock

    def request(self, command: str, **fields) -> dict:
        if command == "time":
            self.clock[0] += 1.0
        return super().request(command, **fields)


@pytest.mark.parametrize("seconds", [250.0, 300.0, 1e9])
def test_the_time_budget_ends_the_extra_rounds(tmp_path, seconds):
    """Cells around the threshold would run to 3 times --repeat rounds; a time budget stops
    the extra rounds before the look that would end past it, at the pace of the first
    rounds (here 4 s a round and cell: its 4 fits, the clock's one second each)."""
    clock, log = [0.0], []
    sides = {BASE: Clocked(BASE, log, 1.0, 1.0, clock), HEAD: Clocked(HEAD, log, 1.10, 1.04, clock)}
    budget = TimeBudget(seconds, cells=2, clock=lambda: clock[0])
    sequential = Sequential(0.10, 3 * AB_REPEAT, budget=budget)
    run_group = functools.partial(run_pair_group, sequential=sequential)
    run_ab(CONFIG, sides, ResultsWriter(tmp_path, keys=[*KEYS, SIDE]), "run", run_group=run_group)
    (rounds,) = {len(r["seconds_per_step_samples"]) for r in read_records(tmp_path)}
    if seconds == 1e9:
        assert (rounds, budget.stopped) == (3 * AB_REPEAT, 0)
    else:
        assert AB_REPEAT <= rounds < 3 * AB_REPEAT and budget.stopped == 2
        # the extra rounds ended in time, and one more look would have ended past it
        assert clock[0] <= seconds < clock[0] + 4 * EXTRA_ROUNDS * 2


def test_each_group_gets_its_share_of_the_time_budget():
    """Shares in proportion to the cells, each with what the groups before it left."""
    budget = TimeBudget(120.0, cells=6, clock=lambda: 10.0)
    assert [budget.deadline(n) for n in (1, 2, 3)] == [30.0, 70.0, 130.0]


def test_the_median_interval_and_when_a_verdict_is_open():
    ratios = [1.0 + 0.01 * k for k in range(-8, 9)]  # 17 ratios around 1.0
    low, high = median_interval(ratios)
    # the sign test's interval: order statistics 5 and 13 of 17 (coverage 95.1%)
    assert (low, high) == pytest.approx((0.96, 1.04))
    assert not undecided(ratios, 0.05, ALPHA)
    assert undecided(ratios, 0.03, ALPHA)  # 1.03 lies in [0.96, 1.04]
    # [0.902, 0.978] holds 1 / 1.03, the bound of an improvement: not a regression's
    assert not undecided([r * 0.94 for r in ratios], 0.03, ALPHA)
    # all of it over 1.03, every ratio over 1: p = 2 / 2**17
    assert not undecided([r * 1.10 for r in ratios], 0.03, ALPHA)
    # the interval over 1.03 but the test not yet under the level the run needs
    assert undecided([r * 1.10 for r in ratios], 0.03, 2 / 2**17)
    assert median_interval([1.5, 2.0]) == (-np.inf, np.inf)  # too few for 95%
    assert undecided([1.5, 2.0], 0.03, ALPHA)


def test_block_ratios_by_hand():
    # block 0: places 0-3 (A B B A), block 1: places 4-7
    sides = [BASE, HEAD, HEAD, BASE, BASE, HEAD, HEAD, BASE]
    seconds = [1.0, 3.0, 12.0, 4.0, 2.0, 2.0, 8.0, 8.0]
    # sqrt(3 * 12) / sqrt(1 * 4) = 3; sqrt(2 * 8) / sqrt(2 * 8) = 1
    assert block_ratios(sides, seconds, range(8)) == pytest.approx([3.0, 1.0])
    # a last block of one round counts; the order of the lists does not matter
    assert block_ratios(
        [HEAD, BASE, BASE, HEAD, BASE, HEAD], [2, 1, 3, 6, 1, 5], [1, 0, 3, 2, 4, 5]
    ) == (pytest.approx([2.0, 5.0]))
    assert alternation(3) == [(BASE, HEAD), (HEAD, BASE), (BASE, HEAD)]


def aa_false_positive_rate(level: float, runs: int, rounds: int = AB_REPEAT) -> float:
    """The share of simulated A/A cells whose paired test gives p < ``level``: both sides
    alike, each fit with lognormal noise, the machine's speed a random walk."""
    rng = np.random.default_rng(0)
    sides = [side for pair in alternation(rounds) for side in pair]
    drift = np.cumsum(0.02 * rng.standard_normal((runs, len(sides))), axis=1)
    seconds = np.exp(drift + 0.1 * rng.standard_normal((runs, len(sides))))
    pvalues = [paired_test(block_ratios(sides, run, range(len(sides)))).pvalue for run in seconds]
    return float(np.mean(np.array(pvalues) < level))


@pytest.mark.parametrize("level", [0.05, 0.01])
def test_the_paired_test_holds_its_level_on_a_a_runs(level):
    """Its units must be independent: neighbouring-fit ratios sharing a BASE fit gave
    nearly twice the nominal rate."""
    rate = aa_false_positive_rate(level, runs=4000)
    assert 0.5 * level <= rate <= 1.5 * level, rate


def test_p_values_are_adjusted_over_the_cells_of_a_run():
    tests = [paired_test([1.0])]  # p = 1
    tests += [replace(paired_test([2.0, 2.0]), pvalue=p) for p in (0.01, 0.04, 0.03, 0.5)]
    # Benjamini-Hochberg by hand: sorted 0.01 0.03 0.04 0.5 1 times 5 / rank gives 0.05
    # 0.075 0.0667 0.625 1, then each the least of itself and those above it
    expected = [1.0, 0.05, 0.04 * 5 / 3, 0.04 * 5 / 3, 0.625]
    assert [t.adjusted for t in adjusted(tests)] == pytest.approx(expected)
    alone = replace(paired_test([2.0, 2.0]), pvalue=ALPHA / 2)
    assert alone.significant
    assert not adjusted([alone, *[replace(alone, pvalue=0.9)] * 3])[0].significant


def drifting_run(seed: int, slowdown: float, ramp: float = 1.5, noise: float = 0.1) -> str:
    """One cell's paired verdict: both sides slow down linearly by ``ramp`` over the run,
    each fit has lognormal noise, HEAD is ``slowdown`` times slower."""
    rng = np.random.default_rng(seed)
    sides = [side for pair in alternation(AB_REPEAT) for side in pair]
    clock = np.linspace(0, 1, len(sides))
    seconds = 1e-4 * (1 + (ramp - 1) * clock) * np.exp(noise * rng.standard_normal(len(sides)))
    seconds *= np.where(np.array(sides) == HEAD, slowdown, 1.0)
    return paired_verdict(paired_test(block_ratios(sides, seconds, range(len(sides)))), 0.10, 0.05)


def test_a_slow_ramp_on_both_sides_is_not_flagged():
    verdicts = Counter(drifting_run(seed, 1.0) for seed in range(200))
    assert verdicts[REGRESSED] + verdicts[IMPROVED] <= 4, verdicts


def test_a_head_slowdown_under_the_ramp_is_flagged_at_the_default_repeat():
    verdicts = Counter(drifting_run(seed, 1.3) for seed in range(200))
    assert verdicts[REGRESSED] >= 196, verdicts


def test_pins_this_environment_does_not_satisfy(tmp_path):
    installed = f"numpy=={np.__version__}\nscipy=={__import__('scipy').__version__}\n"
    (tmp_path / "requirements.txt").write_text(f"# pins\n{installed}")
    assert mismatched_pins(tmp_path) == []
    (tmp_path / "requirements.txt").write_text(f"{installed}NumPy==0.0.1\n")
    assert mismatched_pins(tmp_path) == [f"numpy==0.0.1 (installed: {np.__version__})"]
    (tmp_path / "requirements.txt").write_text("no-such-package-here==1.0\n")
    assert mismatched_pins(tmp_path) == ["no-such-package-here==1.0 (installed: none)"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["no-such-ref-here", "."], "neither a checkout folder nor a git ref"),
        (["tests", "."], "without ortbench/__init__.py"),
        ([".", ".", "--repeat", "12"], "too few pairs"),  # 13 is the least: 7 blocks
        (
            [".", ".", "--repeat", "14", "--max-repeat", "13"],
            "--max-repeat must be at least the 14",
        ),
        ([".", ".", "--measure", "instructions", "--repeat", "1"], "at least 2 when counting"),
        ([".", ".", "--threshold", "0"], "--threshold must be > 0"),
        ([".", ".", "--warn", "0.2"], "--warn must be between 0 and --threshold"),
    ],
)
def test_bad_input_is_one_line(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["ab", *argv, "--cache", str(tmp_path), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_help_gives_the_least_rounds_the_refusal_names(capsys):
    """``--repeat``'s help gives the fewest timed rounds accepted: one fewer is refused."""
    assert main(["ab", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    pattern = r"--repeat REPEAT rounds per cell and side \(default \d+, at least (\d+);"
    least = int(re.search(pattern, help_text).group(1))
    assert main(["ab", ".", ".", "--repeat", str(least - 1)]) == 2
    assert f"--repeat must be at least {least}, got {least - 1}" in capsys.readouterr().err


def test_the_version_is_the_packages(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ortbench {__import__('ortbench').__version__}"


def test_ab_runs_a_git_ref_against_a_checkout_folder(tmp_path, capsys, monkeypatch):
    """Real workers: HEAD's tree exported into the cache against this checkout."""
    monkeypatch.chdir(ROOT)
    if subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    argv = ["ab", "HEAD", str(ROOT), "--contenders", "ort-fwbw", "--batch-sizes", "64"]
    argv += ["--problem", "linear", "--devices", "cpu", "--epochs", "1", "--repeat", "14"]
    status = main([*argv, "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")])
    (folder,) = (tmp_path / "out").iterdir()
    # a timing verdict, whichever it is, decides the status
    assert status == (
        1 if ab_comparison(folder, threshold=AB_THRESHOLD, warn=AB_WARN).failing else 0
    )
    info = json.loads((folder / "ab.json").read_text())
    assert Path(info[BASE]["tree"]).parent.parent == tmp_path / "cache"
    assert (Path(info[BASE]["tree"]) / "ortbench" / "__init__.py").exists()
    assert info[HEAD]["tree"] == str(ROOT)
    records = read_records(folder)
    assert [r[SIDE] for r in records] == [BASE, HEAD]
    for record in records:
        assert record["status"] == "ok" and record["runs_per_step"] > 0
        # 14 rounds, then 4 at a time while the cell's verdict is open, 42 at most
        rounds = len(record["fit_positions"])
        assert 14 <= rounds <= 42 and (rounds - 14) % 4 == 0, rounds
        order = [side for pair in alternation(rounds) for side in pair]
        expected = [k for k, side in enumerate(order) if side == record[SIDE]]
        assert record["fit_positions"] == expected
    assert records[0]["final_train_loss"] == pytest.approx(records[1]["final_train_loss"])
    out, err = capsys.readouterr()
    assert (folder / "ab.md").read_text() in out
    # the progress lines: the workers' start, rounds at most every 10 s, the cell's end
    shown = [line for line in err.splitlines() if line.startswith("[ortbench ab] ")]
    assert shown[0].startswith("[ortbench ab] starting the workers of both sides (")
    group = "linear/make_regression batch=64 cpu"
    assert all(line.startswith(f"[ortbench ab] {group}: round ") for line in shown[1:-1])
    assert shown[-1].startswith(f"[ortbench ab] cell 1/1 ort-fwbw {group}: BASE ")


def test_a_side_whose_ortbench_does_not_import_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    broken = tmp_path / "broken"
    (broken / "ortbench").mkdir(parents=True)
    (broken / "ortbench" / "__init__.py").write_text("raise ImportError('broken checkout')\n")
    argv = ["ab", str(broken), str(ROOT), "--quick", "--cache", str(tmp_path / "cache")]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ortbench: error: the BASE worker did not import ortbench from")
    assert err[-1].endswith("ImportError: broken checkout")


def test_times_that_are_not_positive_are_left_out_of_the_blocks():
    # a slope lost in the noise (-1.0, 0.0) is no time: block 0 keeps 4 / 1, block 1 8 / 4
    sides = [BASE, HEAD, HEAD, BASE, BASE, HEAD, HEAD, BASE]
    ratios = block_ratios(sides, [1.0, -1.0, 4.0, 0.0, 4.0, 8.0, 0.0, 4.0], range(8))
    assert ratios == pytest.approx([4.0, 2.0])
    assert block_ratios([BASE, HEAD], [-1.0, 2.0], [0, 1]) == []


def test_a_bench_folder_is_not_an_ab_folder(tmp_path):
    row = dict.fromkeys(COLUMNS, float("nan")) | CONTEXT
    row.update(run_id="r", contender="ort-full", problem="mlp", dataset="diabetes")
    row.update(batch_size=8, device="cpu", status="ok", timing="slope")
    ResultsWriter(tmp_path).append(row, [1e-4], [])
    with pytest.raises(OrtBenchError, match="not an ortbench ab run folder"):
        ab_comparison(tmp_path)


def test_an_interrupt_keeps_the_groups_that_finished(tmp_path):
    """Ctrl-C during the second group (batch size 64): the first group's rows stay whole."""
    log: list = []

    class Interrupting(FakeSide):
        def request(self, command: str, **fields) -> dict:
            if command == "time" and fields["key"].endswith("batch=64 cpu"):
                raise KeyboardInterrupt
            return super().request(command, **fields)

    sides = {BASE: FakeSide(BASE, log, 1.0), HEAD: Interrupting(HEAD, log, 1.0)}
    config = replace(CONFIG, batch_sizes=(15, 64))
    with pytest.raises(KeyboardInterrupt):
        run_ab(config, sides, ResultsWriter(tmp_path, keys=[*KEYS, SIDE]), "run")
    records = read_records(tmp_path)
    assert {(r["batch_size"], r[SIDE]) for r in records} == {(15, BASE), (15, HEAD)}
    assert len(records) == 4
    assert all(len(r["seconds_per_step_samples"]) == AB_REPEAT for r in records)


def ab_command(tmp_path, monkeypatch, base: FakeSide, head: FakeSide, *options: str) -> int:
    """``ortbench ab`` on ort-full and ort-fwbw (mlp, cpu, 2 epochs, 14 rounds) with the fake
    sides ``base`` and ``head``: no checkout, no worker process; its status."""

    @contextlib.contextmanager
    def fake_workers(folder, sides, worker):
        yield {BASE: base, HEAD: head}

    def fake_checkout(ref, cache, log):
        return Checkout(ref, tmp_path, sys.executable, "this interpreter", "0" * 40)

    monkeypatch.setattr("ortbench.commands.ab.checkout", fake_checkout)
    monkeypatch.setattr("ortbench.commands.ab.started", fake_workers)
    argv = ["ab", "HEAD~1", "HEAD", "--contenders", "ort-full", "ort-fwbw", "--problem", "mlp"]
    argv += ["--devices", "cpu", "--epochs", "2", "--repeat", "14", *options]
    return main([*argv, "--out", str(tmp_path / "out")])


@pytest.mark.parametrize("stopped_at, not_run", [(64, 2), (15, 4)])
def test_an_interrupted_ab_says_so_in_its_heading_and_names_the_cells_not_run(
    tmp_path, capsys, monkeypatch, stopped_at, not_run
):
    """Ctrl-C during a group: ``ab.md`` gives no verdict of "No regression", names the
    cells that never ran, and the status is 130 (fake sides: no worker, no timing)."""
    log: list = []

    class Interrupting(FakeSide):
        def request(self, command: str, **fields) -> dict:
            if command == "time" and fields["key"].endswith(f"batch={stopped_at} cpu"):
                raise KeyboardInterrupt
            return super().request(command, **fields)

    base, head = FakeSide(BASE, log, 1.0), Interrupting(HEAD, log, 1.0)
    assert ab_command(tmp_path, monkeypatch, base, head, "--batch-sizes", "15", "64") == 130
    (folder,) = (tmp_path / "out").iterdir()
    report = (folder / "ab.md").read_text(encoding="utf-8")
    assert report.splitlines()[0] == (
        f"## A/B benchmarks: Interrupted, {not_run} cells not run: no verdict"
    )
    assert "No regression" not in report
    cells = report.split("### Cells not run\n\n")[1].split("\n\n")[0].splitlines()
    assert cells == [
        f"- contender={c}, problem=mlp, dataset=make_regression, batch_size={b}, device=cpu"
        for b in (15, 64)[(15, 64).index(stopped_at) :]
        for c in ("ort-full", "ort-fwbw")
    ]
    printed = capsys.readouterr()
    assert "interrupted: finished cells are kept in" in printed.err
    assert printed.out.strip() == report.strip()  # printed, as a finished run's


def test_workers_run_one_blas_thread_and_one_hash_seed_unless_told(tmp_path, monkeypatch):
    """A checkout whose machine module reports the worker's thread variables and hash
    seed."""
    tree = tmp_path / "tree"
    (tree / "ortbench" / "bench").mkdir(parents=True)
    (tree / "ortbench" / "__init__.py").write_text("")
    (tree / "ortbench" / "bench" / "__init__.py").write_text("")
    (tree / "ortbench" / "bench" / "machine.py").write_text(
        "import os\n"
        "def versions():\n"
        "    names = ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'PYTHONHASHSEED')\n"
        "    return {k: os.environ.get(k) for k in names}\n"
        "def machine():\n"
        "    return {}\n"
    )
    side = Checkout("tree", tree, sys.executable, "this interpreter")
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED"):
        monkeypatch.delenv(name, raising=False)
    worker = Worker(BASE, side, tmp_path / "worker.log")
    worker.close()
    pinned = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    assert worker.context == pinned
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    worker = Worker(BASE, side, tmp_path / "worker.log")
    worker.close()
    assert worker.context == pinned | {"OMP_NUM_THREADS": "2", "PYTHONHASHSEED": "7"}


def test_the_workers_start_together_end_together_and_a_failed_start_closes_the_other(
    tmp_path,
):
    """Each side's worker is made while the other's is (a barrier that both must reach
    before either returns); at the end every worker's input closes before any is waited
    for, so that they exit at once; when one side cannot start, the one that did is
    closed and the failure is raised."""
    barrier = threading.Barrier(len(SIDES), timeout=30)
    events = []

    class Starting:
        def __init__(self, name: str, side: Checkout, log: Path, fail: str = ""):
            barrier.wait()
            if name == fail:
                raise OrtBenchError(f"the {name} worker did not start")
            self.name = name

        def end_input(self) -> None:
            events.append(("end input", self.name))

        def close(self) -> None:
            events.append(("close", self.name))

    sides = {name: Checkout(name, tmp_path, sys.executable, "this interpreter") for name in SIDES}
    with started(tmp_path, sides, Starting) as workers:
        assert sorted(workers) == sorted(SIDES)
    assert [e for e, _ in events] == ["end input"] * len(SIDES) + ["close"] * len(SIDES)
    assert sorted(n for e, n in events if e == "close") == sorted(SIDES)
    events.clear()
    barrier.reset()
    failing = functools.partial(Starting, fail=HEAD)
    with (
        pytest.raises(OrtBenchError, match="the HEAD worker did not start"),
        started(tmp_path, sides, failing),
    ):
        pytest.fail("the block ran without its HEAD worker")
    assert [n for e, n in events if e == "close"] == [BASE]


def test_a_worker_interrupted_while_it_starts_leaves_no_process(tmp_path, monkeypatch):
    """Ctrl-C while a worker starts (seconds under valgrind), before it answers: its
    process is killed, not left running after ortbench exits."""
    made, popen = [], subprocess.Popen

    def recording(*args, **kwargs):
        made.append(popen(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr("ortbench.bench.ab.subprocess.Popen", recording)
    slow = tmp_path / "python"
    slow.write_text("#!/bin/sh\nexec sleep 60\n")
    slow.chmod(0o755)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            Worker(BASE, Checkout("slow", tmp_path, str(slow), "a slow one"), tmp_path / "log")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    (process,) = made
    assert process.poll() is not None


def test_cells_still_open_at_max_repeat_are_told_in_ab_md(tmp_path, monkeypatch):
    """HEAD around the threshold, --max-repeat equal to --repeat: no cell can be decided,
    and ab.md says how many reached the most rounds still open and what decides them."""

    log: list = []
    base, head = FakeSide(BASE, log, 1.0), Wobbly(HEAD, log, 1.10, 1.04)
    options = ["--batch-sizes", "15", "--threshold", "0.14", "--warn", "0.05"]  # 1.14 a step
    status = ab_command(tmp_path, monkeypatch, base, head, *options, "--max-repeat", "14")
    assert status in (0, 1)  # either side of 1.14
    (folder,) = (tmp_path / "out").iterdir()
    report = (folder / "ab.md").read_text(encoding="utf-8")
    assert "2 cells reached --max-repeat (14 rounds) with their verdict still open" in report


def test_a_base_that_fails_every_cell_compares_nothing(tmp_path, capsys, monkeypatch):
    """An old commit whose code cannot run the matrix: its cells errored in BASE only,
    each "improved", but nothing was measured on both sides, so no verdict of "No
    regression" and the status of nothing to compare (3), not success."""

    class Failing(FakeSide):
        def request(self, command: str, **fields) -> dict:
            if command == "prepare":
                return {"status": "failed: AttributeError: 'Problem' object has no attribute"}
            return super().request(command, **fields)

    log: list = []
    base, head = Failing(BASE, log, 1.0), FakeSide(HEAD, log, 1.0)
    assert ab_command(tmp_path, monkeypatch, base, head, "--batch-sizes", "15") == 3
    (folder,) = (tmp_path / "out").iterdir()
    report = (folder / "ab.md").read_text(encoding="utf-8")
    assert report.splitlines()[0] == "## A/B benchmarks: Nothing measured on both sides"
    assert report.count("errored in BASE only") == 3 * 2  # time and two counters a cell
    assert "no cell was measured on both sides" in capsys.readouterr().err


def test_a_ref_outside_a_git_repository_says_where_to_run(tmp_path, capsys, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert main(["ab", "HEAD", str(ROOT), "--cache", str(tmp_path), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "HEAD is not a folder, and the current directory is not in a git repository" in err
