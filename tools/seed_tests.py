"""Run onnxcustom's own unit tests against ortbench, from a checkout of onnxcustom.

The seed's tests are not in this repository (they are its authors' code). This script
copies them from a checkout into a temporary folder, makes the few edits listed in
:data:`EDITS` (each with its reason, each checked to apply), runs them with pytest and
``tools/seed_standins.py`` (which answers their ``onnxcustom``, ``pyquickhelper`` and
``mlprodict`` imports), and prints the passed tests per module and each failure::

    git clone https://github.com/sdpython/onnxcustom   # 671b3c9, its last commit
    python tools/seed_tests.py onnxcustom
    python tools/seed_tests.py onnxcustom --keep seed-run -- -k nesterov

``tests/seed_suite/README.md`` keeps the counts and the reason of each failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass

#: The seed's test modules on training, in its checkout.
MODULES = [
    "_unittests/ut_training/test_data_loader.py",
    "_unittests/ut_training/test_grad_helper.py",
    "_unittests/ut_training/test_gradient_mlp.py",
    "_unittests/ut_training/test_learning_rate.py",
    "_unittests/ut_training/test_optimizers.py",
    "_unittests/ut_training/test_optimizers_classification.py",
    "_unittests/ut_training/test_optimizers_forward_backward.py",
    "_unittests/ut_training/test_optimizers_grid_score.py",
    "_unittests/ut_training/test_optimizers_nan.py",
    "_unittests/ut_training/test_orttraining_forward_backward.py",
    "_unittests/ut_training/test_training_qdq.py",
    "_unittests/ut_utils/test_onnx_function.py",
    "_unittests/ut_utils/test_onnx_helper.py",
    "_unittests/ut_utils/test_orttraining_helper.py",
]


@dataclass(frozen=True)
class Edit:
    """One textual change to the seed's tests beyond their imports."""

    old: str
    new: str
    reason: str


#: Every edit, applied in every module where ``old`` occurs; each must apply somewhere.
EDITS = [
    Edit(
        "from onnxruntime import TrainingSession",
        "from onnxruntime.training.api import Module as TrainingSession",
        "the tests skip themselves without onnxruntime's legacy TrainingSession, gone "
        "from onnxruntime-training; its training API's Module says the same thing",
    ),
    Edit(
        "'onnxcustom'",
        "'ortbench.seed'",
        "the logger the tests listen to: ortbench's seed classes log to 'ortbench.seed'",
    ),
    Edit(
        "SGDClassifier(loss='log')",
        "SGDClassifier(loss='log_loss')",
        "scikit-learn renamed the loss",
    ),
    Edit(
        "log_loss(y, X[:, 1], eps=1e-6)",
        "log_loss(y, numpy.clip(X[:, 1], 1e-6, 1 - 1e-6))",
        "scikit-learn removed log_loss's eps, which clipped the probabilities so",
    ),
    Edit(
        "log_loss(y_test, reg.predict_proba(X_test), eps=1 - 6)",
        "log_loss(y_test, numpy.clip(reg.predict_proba(X_test), 1 - 6, 1 - (1 - 6)))",
        "scikit-learn removed log_loss's eps, which clipped the probabilities so",
    ),
]


class SeedTestsError(Exception):
    """A checkout that is not onnxcustom's, or an edit that no longer applies."""


def copy_and_edit(checkout: str, folder: str) -> dict[str, int]:
    """Copies the seed's modules into ``folder`` with :data:`EDITS` made.

    Returns how many times each edit applied; raises :class:`SeedTestsError` for a
    missing module or an edit that applied nowhere.
    """
    applied = Counter()
    for module in MODULES:
        source = os.path.join(checkout, module)
        if not os.path.isfile(source):
            raise SeedTestsError(
                f"{module} is not in {checkout}: give a checkout of onnxcustom "
                "(git clone https://github.com/sdpython/onnxcustom)"
            )
        with open(source, encoding="utf-8") as f:
            text = f.read()
        for edit in EDITS:
            applied[edit.old] += text.count(edit.old)
            text = text.replace(edit.old, edit.new)
        with open(os.path.join(folder, os.path.basename(module)), "w", encoding="utf-8") as f:
            f.write(text)
    missing = [edit.old for edit in EDITS if applied[edit.old] == 0]
    if missing:
        raise SeedTestsError(f"these edits apply nowhere (another onnxcustom?): {missing}")
    return dict(applied)


def summarize(junit: str) -> tuple[dict[str, Counter], list[tuple[str, str]]]:
    """Outcomes per module and the failures (test id, first line of the message) of a
    pytest JUnit XML report."""
    per_module: dict[str, Counter] = {}
    failures = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")[0]
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "failed" if child.tag != "skipped" else "skipped"
                if outcome == "failed":
                    message = (child.get("message") or "").strip().splitlines() or [""]
                    failures.append((f"{module}::{case.get('name')}", message[0][:160]))
                break
        per_module.setdefault(module, Counter())[outcome] += 1
    return per_module, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="a checkout of onnxcustom (its last commit: 671b3c9)")
    parser.add_argument("--keep", help="run in this folder and keep it (default: a temporary one)")
    parser.add_argument("--", dest="pytest_args", help="what follows goes to pytest")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.pytest_args = argv[split + 1 :]

    folder = args.keep or tempfile.mkdtemp(prefix="seed-tests-")
    os.makedirs(folder, exist_ok=True)
    try:
        try:
            copy_and_edit(args.checkout, folder)
        except SeedTestsError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        tools = os.path.dirname(os.path.abspath(__file__))
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [tools, os.environ.get("PYTHONPATH")])),
        )
        junit = os.path.join(folder, "junit.xml")
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "seed_standins",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "--rootdir",
            folder,
            folder,
            *args.pytest_args,
        ]
        subprocess.run(command, cwd=folder, env=env, check=False)
        if not os.path.isfile(junit):
            print("error: pytest wrote no report", file=sys.stderr)
            return 2
        per_module, failures = summarize(junit)
        total = Counter()
        print(f"\n{'seed test module':<40} passed / tests")
        for module in sorted(per_module):
            counts = per_module[module]
            total.update(counts)
            print(f"{module:<40} {counts['passed']:>3} / {sum(counts.values())}")
        tests = sum(total.values())
        print(
            f"{'all':<40} {total['passed']:>3} / {tests}"
            f" ({100 * total['passed'] / max(tests, 1):.1f}%; {total['skipped']} skipped)"
        )
        for test, message in failures:
            print(f"failure: {test}: {message}")
        return 0 if not failures else 1
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
