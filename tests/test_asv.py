"""The asv suites: asv's own check, and a real ``asv run`` whose results compare reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ortbench.bench.machine import available_devices
from ortbench.cli import main
from ortbench.report.resultsets import load_result_set

pytest.importorskip("asv")

ROOT = Path(__file__).resolve().parents[1]
ASV = [sys.executable, "-m", "asv"]


def asv(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home)}  # asv keeps its machine file in HOME
    return subprocess.run(
        [*ASV, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_asv_check_passes(tmp_path):
    done = asv("check", "--python=same", cwd=ROOT, home=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No problems found" in done.stdout


def commit_of_checkout() -> str:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    done = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode:
        pytest.skip("not a git checkout")
    return done.stdout.strip()


@pytest.mark.training_build  # times ort-full cells
def test_asv_run_results_are_read_by_compare(tmp_path, capsys):
    commit = commit_of_checkout()
    config = json.loads((ROOT / "asv.conf.json").read_text())
    config.update(
        repo=str(ROOT),
        benchmark_dir=str(ROOT / "benchmarks"),
        results_dir=str(tmp_path / "results"),
        html_dir=str(tmp_path / "html"),
        env_dir=str(tmp_path / "env"),
    )
    conf = tmp_path / "asv.conf.json"
    conf.write_text(json.dumps(config))
    assert asv("machine", "--yes", "--machine", "ci", cwd=tmp_path, home=tmp_path).returncode == 0
    cells = r"\('ort-full', 'linear', 15, '(cpu|cuda)'\)"
    done = asv(
        "run", "--config", str(conf), "--python=same", "--quick", "--record-samples",
        "--machine", "ci", "--set-commit-hash", commit,
        "--bench", f"TimeEpoch.time_epoch{cells}", "--bench", f"track_runs_per_step{cells}",
        cwd=tmp_path, home=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (result_file,) = (tmp_path / "results" / "ci").glob(f"{commit[:8]}-*.json")

    measured = load_result_set(result_file).measurements
    time_cpu = measured[
        ("bench_training.TimeEpoch.time_epoch", "contender='ort-full', problem='linear', "
         "batch_size=15, device='cpu'")
    ]  # fmt: skip
    assert time_cpu.unit == "seconds" and 0 < time_cpu.value < 10
    runs = measured[
        ("bench_training.RuntimeCounters.track_runs_per_step", "contender='ort-full', "
         "problem='linear', batch_size=15, device='cpu'")
    ]  # fmt: skip
    assert runs.counter and runs.value == 2.0
    cuda = [m for (_, params), m in measured.items() if "device='cuda'" in params]
    assert bool(cuda) == ("cuda" in available_devices())  # only the devices this machine has

    assert main(["compare", str(result_file), str(result_file)]) == 0
    assert "2 unchanged" in capsys.readouterr().out


def test_asv_environment_pins_requirements_txt():
    """asv's virtualenv installs what requirements.txt pins, but the newest onnx (what
    ``pip install ".[training]"`` gets), torch where its CPU wheel installs, and jax (the
    ``jax`` extra), so that every contender runs there."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, _, version = line.split("#")[0].strip().partition("==")
        if version:
            pins[name] = [version]
    config = json.loads((ROOT / "asv.conf.json").read_text())
    pins.update(onnx=[""], torch=["2.13.0+cpu", None])
    assert config["matrix"]["req"] == pins
    assert config["install_command"] == [
        "in-dir={env_dir} python -mpip install {wheel_file}[training,jax]"
    ]
