"""``ortbench compare`` and ``ortbench report`` need no runtime: every module of
:mod:`ortbench.report` imports, and both commands run, in a process where onnxruntime,
scikit-learn, skl2onnx and torch cannot be imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_compare import bench_run

from ortbench.schema import CONTENDER_NAMES, PROBLEM_TASKS, builtin_task

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("onnxruntime", "sklearn", "skl2onnx", "torch")

#: Makes the blocked packages look absent (as in an environment without them), imports
#: every module of ortbench.report, then runs the command line on sys.argv[1:].
SCRIPT = f"""
import importlib, pkgutil, sys

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
import ortbench.report
for module in pkgutil.iter_modules(ortbench.report.__path__):
    importlib.import_module(f"ortbench.report.{{module.name}}")
from ortbench.__main__ import main
status = main(sys.argv[1:])
loaded = sorted({{m.partition(".")[0] for m in sys.modules}} & set({BLOCKED!r}))
print(f"loaded: {{loaded}}", file=sys.stderr)
sys.exit(status)
"""


def without_runtime(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, env=env
    )


def test_compare_and_report_run_without_a_runtime(tmp_path):
    base = bench_run(tmp_path / "base", 1.0)
    slow = bench_run(tmp_path / "slow", 2.0)
    done = without_runtime("compare", str(base), str(slow))
    assert done.returncode == 1, done.stderr
    assert "| **regressed** | `seconds_per_step` | contender=ort-full, problem=mlp" in done.stdout
    assert done.stderr.splitlines()[-1] == "loaded: []"

    done = without_runtime("report", str(slow))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(slow / "index.html")
    for page in ("summary.md", "index.html"):
        assert "ort-fwbw" in (slow / page).read_text(encoding="utf-8")
    assert done.stderr.splitlines()[-1] == "loaded: []"


def test_the_runtime_commands_name_the_extras_without_a_runtime():
    for argv in (["bench", "--quick"], ["profile", "ort-fwbw"], ["bench", "--help"]):
        done = without_runtime(*argv)
        assert done.returncode == 2, done.stderr
        line, _ = done.stderr.splitlines()
        assert line.startswith("ortbench: error: no onnxruntime is installed: pip install")
        assert "'ortbench[cpu]'" in line and "'ortbench[training]'" in line


def test_the_reports_name_every_contender_and_problem_as_the_harness_does():
    from ortbench.bench.contenders import CONTENDERS
    from ortbench.bench.problems import PROBLEMS, problem_task, sized_problems

    assert tuple(CONTENDERS) == CONTENDER_NAMES
    assert set(PROBLEM_TASKS) == set(PROBLEMS)
    for name in (*PROBLEMS, *sized_problems(PROBLEMS, ((7,), (9, 3)))):
        assert builtin_task(name) == problem_task(name), name
    assert builtin_task("my_model") is None
