"""The names every layer shares: the columns and files of a run folder, the sides of an A/B
run, the calibration probes, the contenders' and problems' names as the reports show them.

It imports nothing of ortbench and no runtime, so that the reports (``ortbench compare``,
``ortbench report``) read run folders where no onnxruntime is installed. The modules that
produce these facts import them from here: a contender or a built-in problem added there
is named here too (a test checks that the two agree).
"""

from __future__ import annotations

import re

# --- a run folder: results.csv, results.jsonl, loss_curves.csv, calibration.json

#: The cell's coordinates: what identifies a row across runs.
KEYS = ["contender", "problem", "dataset", "batch_size", "device"]

#: Columns a cell measures (NaN when it did not get that far).
MEASURED = [
    "seconds_per_step",
    "seconds_per_step_min",
    "seconds_per_step_max",
    "seconds_per_fit_overhead",
    "peak_memory_mb",
    "initial_loss",
    "final_train_loss",
    "validation_loss",
    "validation_score",
    "runs_per_step",
    "ortvalues_per_step",
    "intra_op_threads",
]

#: Columns of results.csv, in order.
COLUMNS = [
    "run_id",
    *KEYS,
    "epochs",
    "steps",
    "repeat",
    "timing",
    "trained_values",
    "learning_rate",
    "baseline",
    *MEASURED,
    "status",
    "python_version",
    "ortbench_version",
    "numpy_version",
    "sklearn_version",
    "onnx_version",
    "onnxruntime_version",
    "skl2onnx_version",
    "torch_version",
    "jax_version",
    "cpu_model",
    "cpu_cores",
    "cpu_threads",
    "platform",
    "kernels",
    "kernel_pins",
]
#: Columns that results.csv files written before them lack (read as empty).
LATER_COLUMNS = ("jax_version", "kernels", "kernel_pins", "intra_op_threads", "learning_rate")

RESULTS_CSV = "results.csv"
RESULTS_JSONL = "results.jsonl"
LOSS_CURVES_CSV = "loss_curves.csv"
#: The cells a run set out to run, written as it starts, and whether a signal stopped it.
PLAN_JSON = "plan.json"
#: The status the reports give a planned cell that has no row: its run never reached it.
NOT_RUN = "not run"
#: The JSON field holding a cell's timing samples, one per repeat.
SAMPLES = "seconds_per_step_samples"

# --- the two sides of an A/B run

#: The two sides of an A/B run, as the ``side`` column spells them.
BASE, HEAD = "BASE", "HEAD"
SIDES = (BASE, HEAD)
#: The column naming a row's side, and the JSON field holding each sample's place in
#: its cell's order of samples (both sides counted).
SIDE = "side"
POSITIONS = "fit_positions"
#: The JSON field holding each round's long fit in seconds per step.
FITS = "long_fit_seconds_per_step"
#: The JSON fields of a row of ``ab --measure instructions``: the median count per step,
#: each round's count per step, their relative spread ((max - min) / median), and the
#: median count a fit pays once.
PER_STEP = "instructions_per_step"
INSTRUCTION_SAMPLES = "instructions_per_step_samples"
SPREAD = "instructions_per_step_spread"
PER_FIT = "instructions_per_fit_overhead"

# --- the machine's calibration

CALIBRATION_JSON = "calibration.json"
NUMPY_PROBE = "numpy-matmul"
ORT_PROBE = "ort-one-node"
#: The probes: they measure the machine alone, through no code a change under test touches
#: (older runs' calibrations also hold the baseline contender, which drift leaves out).
MACHINE_PROBES = (NUMPY_PROBE, ORT_PROBE)

# --- contenders and problems

#: Every contender of :data:`ortbench.bench.contenders.CONTENDERS`, in its order (which
#: gives each its colour in the plots).
CONTENDER_NAMES = (
    "sklearn-mlp-sgd",
    "sklearn-mlp-nesterov",
    "sklearn-sgd",
    "ort-full",
    "ort-fwbw",
    "ort-fwbw-nesterov",
    "ort-portable-fwbw",
    "ort-portable-full",
    "ort-portable-nesterov",
    "torch-sgd",
    "torch-nesterov",
    "jax-sgd",
    "jax-nesterov",
    "jax-scan",
    "ort-portable-loop",
)
#: The contender speed-ups are measured against.
BASELINE = "sklearn-mlp-sgd"

#: The task of each built-in problem (:data:`ortbench.bench.problems.PROBLEMS`).
PROBLEM_TASKS = {
    "linear": "regression",
    "mlp": "regression",
    "mlp-binary": "binary",
    "mlp-multiclass": "multiclass",
    "cnn": "multiclass",
    "transformer": "multiclass",
}
_SIZED = re.compile(r"^(?P<base>[a-z-]+?)((?:-\d+)+)$")


def builtin_task(name: str) -> str | None:
    """The task of a built-in problem by its name, a sized one (``mlp-256-128``) included.

    Parameters
    ----------
    name : str
        A problem's name, as results.csv spells it.

    Returns
    -------
    str or None
        ``'regression'``, ``'binary'`` or ``'multiclass'``; None for another name (a
        user's model).
    """
    sized = _SIZED.match(name)
    return PROBLEM_TASKS.get(sized["base"] if sized else name)


# --- profiles

#: The file of a profile folder that describes its run.
PROFILE_JSON = "profile.json"
#: The trainers' epoch loop: the flame graph's share under it is reported.
EPOCH_LOOP = "_run_epoch"
#: A flame graph of fewer samples is too coarse to read shares from: the profile says so.
MIN_FLAME_SAMPLES = 50
