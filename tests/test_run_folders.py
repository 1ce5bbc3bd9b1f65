"""Run folders: created atomically, written in whole rows, refused when unusable."""

from __future__ import annotations

import errno
import math
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import onnxruntime
import pandas as pd
import pytest
from helpers import cpu_build_only

from ortbench.bench import machine, store
from ortbench.bench.store import (
    COLUMNS,
    LOSS_CURVES_CSV,
    RESULTS_CSV,
    RESULTS_JSONL,
    ResultsWriter,
    create_run_folder,
    read_records,
)
from ortbench.cli import main
from ortbench.report.summary import summary_markdown

TINY = "--contenders ort-portable-fwbw --problem linear --dataset diabetes --batch-sizes 8 --devices cpu"
TINY += " --epochs 1 --repeat 2 --keep-going"


def test_concurrent_processes_get_their_own_folders(tmp_path):
    with ProcessPoolExecutor(4) as pool:
        folders = list(pool.map(create_run_folder, [tmp_path] * 12, ["same-second"] * 12))
    names = sorted(f.name for f in folders)
    assert len(set(names)) == 12
    assert names == sorted(["same-second", *(f"same-second-{k}" for k in range(1, 12))])
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_concurrent_runs_into_one_out_keep_their_rows_apart(tmp_path, monkeypatch):
    monkeypatch.setattr("ortbench.commands.bench.run_id_now", lambda: "20260101-000000")
    statuses = []

    def run() -> None:
        statuses.append(main(["bench", *TINY.split(), "--out", str(tmp_path)]))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [0, 0]
    folders = sorted(tmp_path.iterdir())
    assert [f.name for f in folders] == ["20260101-000000", "20260101-000000-1"]
    for folder in folders:
        records = read_records(folder)
        assert [r["run_id"] for r in records] == [folder.name]
        assert list(pd.read_csv(folder / RESULTS_CSV).run_id) == [folder.name]


def row(k: int, status: str = "ok") -> dict:
    values = dict.fromkeys(COLUMNS, math.nan)
    values.update(
        run_id="r", contender=f"c{k}", problem="mlp", dataset="diabetes", batch_size=8,
        device="cpu", status=status, seconds_per_step=1e-3 * (k + 1), timing="slope",
    )  # fmt: skip
    return values


def full_disk_after(monkeypatch, good_writes: int, written: int = 10) -> None:
    """Writes of the run's files fail with ENOSPC after ``good_writes`` whole ones, the
    failing one having put its first ``written`` bytes on disk."""
    real_open = open
    count = [0]

    class Full:
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            count[0] += 1
            if count[0] > good_writes:
                self.f.write(data[:written])
                self.f.flush()
                raise OSError(errno.ENOSPC, "No space left on device", self.f.name)
            return self.f.write(data)

    def opener(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return Full(f) if "a" in mode else f

    monkeypatch.setattr(store, "open", opener, raising=False)


@pytest.mark.parametrize("good_writes", [0, 3, 4, 5, 7])
def test_a_full_disk_leaves_whole_rows(tmp_path, monkeypatch, good_writes):
    writer = ResultsWriter(tmp_path)
    full_disk_after(monkeypatch, good_writes)
    written = 0
    with pytest.raises(store.OrtBenchError) as error:
        for k in range(4):  # three files a row: the fourth row never fits
            writer.append(row(k), [1e-3], [0.5, 0.25])
            written += 1
    message = str(error.value)
    assert "\n" not in message and "No space left on device" in message
    assert str(tmp_path) in message
    monkeypatch.undo()
    assert written == good_writes // 3
    jsonl = (tmp_path / RESULTS_JSONL).read_text() if written else ""
    assert jsonl.count("\n") == written and (not jsonl or jsonl.endswith("\n"))
    if written:
        assert [r["contender"] for r in read_records(tmp_path)] == [f"c{k}" for k in range(written)]
        assert len(pd.read_csv(tmp_path / RESULTS_CSV)) == written
        assert len(pd.read_csv(tmp_path / LOSS_CURVES_CSV)) == 2 * written
    for name in (RESULTS_CSV, LOSS_CURVES_CSV):
        text = (tmp_path / name).read_text() if (tmp_path / name).exists() else ""
        assert text == "" or text.endswith("\n")


def test_a_full_disk_stops_the_bench_with_one_line(tmp_path, monkeypatch, capsys):
    full_disk_after(monkeypatch, 0)
    assert main(["bench", *TINY.split(), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("ortbench: error: cannot write ")
    assert err[-1].endswith(
        "No space left on device; the run stopped, its files end on the last whole row"
    )


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_an_unusable_out_is_refused_before_any_work(tmp_path, command, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    argv = ["bench", *TINY.split()] if command == "bench" else ["profile", "ort-fwbw"]
    for out, reason in (
        (a_file, "it is a file; name a folder"),
        (a_file / "sub", "Not a directory"),
    ):
        assert main([*argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == f"ortbench: error: cannot use --out {out}: {reason}\n"
    assert a_file.read_text() == "mine"


def test_report_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    (tmp_path / "index.html").write_text("<p>my page</p>")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not an ortbench run folder" in err
    assert (tmp_path / "index.html").read_text() == "<p>my page</p>"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00\xff\xfe binary", "is not a results table"),
        (b"", "is not a results table"),
        (b"a,b\n1,2\n", "lacks the columns run_id"),
        (b'a,"b\n1,2\n', "is not a results table"),
    ],
)
def test_report_refuses_malformed_results(tmp_path, capsys, content, message):
    (tmp_path / RESULTS_CSV).write_bytes(content)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "index.html").exists()


def _counted_rows(folder: Path, n: int) -> None:
    """``n`` timed rows of the same cell's counts, written by the run's writer."""
    writer = ResultsWriter(folder)
    for k in range(n):
        values = {**row(k), "epochs": 3, "steps": 300, "repeat": 8, "cpu_cores": 2}
        writer.append(values, [values["seconds_per_step"]], [])


def test_a_time_that_is_not_a_number_is_a_bad_row_left_out(tmp_path, capsys):
    _counted_rows(tmp_path, 3)
    table = pd.read_csv(tmp_path / RESULTS_CSV)
    table["seconds_per_step"] = table.seconds_per_step.astype(object)
    table.loc[1, "seconds_per_step"] = "abc"
    table.to_csv(tmp_path / RESULTS_CSV, index=False)
    assert main(["report", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert err == (
        f"ortbench: bad row left out: {tmp_path / RESULTS_CSV} line 3: seconds_per_step "
        "'abc' is not a number\n"
    )
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "| 8 | c0 | 1000 |" in summary and "| 8 | c2 | 3000 |" in summary
    assert "| c1 |" not in summary
    (bad,) = store.read_results(tmp_path).attrs["bad_rows"]
    assert bad.cell == "contender=c1, problem=mlp, dataset=diabetes, batch_size=8, device=cpu"


def test_counts_stay_integers_when_a_row_was_cut(tmp_path, capsys):
    _counted_rows(tmp_path, 2)
    with open(tmp_path / RESULTS_CSV, "a") as f:
        f.write("r,c2,mlp,diabe")  # an interruption cut the last row before its batch size
    results = store.read_results(tmp_path)
    assert all(results[c].dtype == "int64" for c in ("batch_size", "epochs", "repeat"))
    assert main(["report", str(tmp_path)]) == 0
    assert "line 4: no batch_size, device, status" in capsys.readouterr().err
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "median over 8 rounds" in summary and "at least 3 epochs" in summary
    assert "| 8 | c0 |" in summary and ", 2 cores," in summary
    assert ".0 rounds" not in summary and ".0 epochs" not in summary


def test_an_unavailable_cell_names_no_timed_fits(tmp_path):
    writer = ResultsWriter(tmp_path)
    planned = "slope between 1- and 2+-epoch fits"
    for k, status in enumerate(["unavailable: needs onnxruntime-training 1.19.2", "ok"]):
        writer.append({**row(k, status), "timing": planned}, [1e-3], [])
    table = pd.read_csv(tmp_path / RESULTS_CSV, keep_default_na=False)
    assert list(table.timing) == ["", planned]
    assert [r["timing"] for r in read_records(tmp_path)] == ["", planned]


def test_a_pipe_in_a_status_keeps_the_summary_table_whole():
    results = pd.DataFrame([row(0), row(1, "failed: ValueError: shape (3|4) | (5)")])
    results["cpu_model"] = "cpu"
    text = summary_markdown(results)
    (line,) = [line for line in text.splitlines() if "ValueError" in line]
    assert line.endswith("| failed: ValueError: shape (3\\|4) \\| (5) |")
    assert line.replace("\\|", "").count("|") == 7


def test_default_devices_are_those_that_answer(monkeypatch):
    machine.cuda_answers.cache_clear()
    cuda_installed = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    assert machine.available_devices() == (("cpu", "cuda") if cuda_installed else ("cpu",))
    if not cuda_installed:  # a provider listed but no device behind it: still no CUDA
        monkeypatch.setattr(
            onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider"]
        )
        machine.cuda_answers.cache_clear()
        assert machine.available_devices() == ("cpu",)
    machine.cuda_answers.cache_clear()


def test_a_run_where_no_cell_can_run_fails_with_one_line_and_no_folder(tmp_path, capsys):
    options = TINY.replace("ort-portable-fwbw", "sklearn-sgd").replace("linear", "mlp")
    status = main(["bench", *options.split(), "--out", str(tmp_path)])
    err = capsys.readouterr().err.splitlines()
    assert status == 2
    assert err == ["ortbench: error: no cell can run: SGDRegressor trains linear regressions only"]
    assert not any(tmp_path.iterdir())


@cpu_build_only
@pytest.mark.parametrize(
    "command", [["bench", *TINY.split()], ["ab", ".", ".", *TINY.split()[:-3], "--repeat", "13"]]
)
def test_devices_none_of_which_answers_are_refused_before_any_work(tmp_path, capsys, command):
    """bench, and ab, whose sides run on this machine too."""
    argv = [c.replace("cpu", "cuda") for c in command]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "ortbench: error: --devices cuda: none answers on this machine, which has cpu: CUDA "
        'needs the gpu extra (pip install ".[gpu]") and a device its libraries load on'
    ]
    assert not any(tmp_path.iterdir())


def test_a_run_folder_is_named_after_its_run(tmp_path):
    first = create_run_folder(tmp_path, "id")
    second = create_run_folder(tmp_path, "id")
    assert (first.name, second.name) == ("id", "id-1")
    assert isinstance(first, Path) and first.is_dir() and not any(first.iterdir())


def test_a_report_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys):
    def full(results):
        raise OSError(errno.ENOSPC, "No space left on device", str(results.folder / "speedup.png"))

    monkeypatch.setattr("ortbench.report.html.write_plots", full)
    assert main(["bench", *TINY.split(), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"ortbench: error: cannot write {next(tmp_path.iterdir()) / 'speedup.png'}: "
        "No space left on device"
    )
