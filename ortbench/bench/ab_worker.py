"""One side of an A/B run: a process that fits and times that side's contenders on request.

The coordinator (:mod:`ortbench.bench.ab`) starts this file's source with ``python -c``
in the side's checkout, with that checkout first on the path, so ``ortbench`` here is the
side's own code: its contenders, problems and training engine. What this file itself
does (the scores, the protocol) comes from the coordinator's version, and so do the
timing and the peak memory: the coordinator names its own ``ortbench/bench/timing.py``
and ``ortbench/bench/memory.py`` as this process's arguments, loaded here by their paths. Both sides are thus measured the same way. Of
the side's ortbench it uses ``make_problem`` (``load_user_problem`` for a user's files),
``make_contender`` and the contender interface; a cell whose spec the side cannot build
(an option its version lacks) fails with that reason.

Protocol: one JSON object per line on stdin, one reply per line on the channel (the
original stdout; anything a library prints goes to stderr, the side's log). Replies
carry ``error`` when the request failed. The process ends at the end of its input.
"""

import contextlib
import dataclasses
import functools
import gc
import importlib.util
import json
import os
import signal
import sys


def _load(name, path):
    """The module of the file at ``path``, under ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass looks its module up while it is made
    spec.loader.exec_module(module)
    return module


class State:
    """What the requests share: the coordinator's timing protocol and peak-memory
    measurement (loaded from the files at ``timing_path`` and ``memory_path``), the
    fitted contenders by key, the heap settled for them, and the callgrind client's stop
    while its instrumentation is on (``None`` otherwise)."""

    def __init__(self, timing_path, memory_path):
        self.timing = _load("_ab_timing", timing_path)
        self.memory = _load("_ab_memory", memory_path)
        self.fitted = {}
        self.heap = contextlib.ExitStack()
        self.instrumented = None

    def uninstrumented(self):
        """Switch callgrind's instrumentation off if a count left it on: building and
        releasing models runs at valgrind's uninstrumented speed."""
        if self.instrumented is not None:
            self.instrumented()
            self.instrumented = None


def _first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _hello(request, state):
    """Where the side's ortbench was imported from, its versions and the machine (none
    when the side has no ``ortbench.bench.machine`` to tell them)."""
    import ortbench

    try:
        from ortbench.bench import machine

        context = {**machine.versions(), **machine.machine()}
    except (ImportError, AttributeError):
        context = {}
    return {"ortbench": os.path.dirname(ortbench.__file__), "context": context}


def _problem(spec):
    """The cell's problem, built by the side's ortbench from the spec (see
    ``ortbench.bench.ab.CellSpec``)."""
    from ortbench.bench.problems import make_problem

    user = spec["user"]
    if user is not None:
        from ortbench.bench.user_model import UserFiles, load_user_problem

        tuples = {key: tuple(user[key]) for key in ("data", "weights") if user[key] is not None}
        # options an older side lacks: left out when not given, else the cell fails saying so
        known = {field.name for field in dataclasses.fields(UserFiles)}
        lacking = [key for key in user if key not in known and user[key] is not None]
        if lacking:
            options = ", ".join(f"--{key.replace('_', '-')}" for key in lacking)
            raise ValueError(f"this side's ortbench has no {options} option")
        kept = {key: value for key, value in {**user, **tuples}.items() if key in known}
        return load_user_problem(UserFiles(**kept))
    sizes = {key: spec[key] for key in ("n_samples", "n_features") if spec[key] is not None}
    return make_problem(spec["problem"], spec["dataset"], **sizes)


def _prepare(request, state):
    """Build the contender of one cell, fit it once, score it (the row's columns)."""
    from ortbench.bench.contenders import Unavailable, make_contender

    state.uninstrumented()
    spec = request["cell"]
    problem = _problem(spec)
    epochs = request["epochs"]
    row = {
        "trained_values": problem.trained_values,
        "learning_rate": problem.eta0,
        "steps": epochs * problem.steps_per_epoch(spec["batch_size"]),
        "status": "ok",
    }
    try:
        contender = make_contender(spec["contender"], problem, spec["batch_size"], spec["device"])
    except Unavailable as e:
        return {**row, "status": f"unavailable: {e}"}
    except ValueError as e:  # a contender this side does not have
        return {**row, "status": f"unavailable: {_first_line(e)}"}
    data = problem.data
    weights = getattr(data, "w_train", None), getattr(data, "w_val", None)
    try:
        row["initial_loss"] = problem.loss(
            data.y_train, contender.predict(data.X_train), weights[0]
        )
        with state.memory.peak_memory() as peak:
            contender.fit(epochs)
        row["peak_memory_mb"] = peak.mb
        row["final_train_loss"] = contender.loss_curve_[-1]
        validation = contender.predict(data.X_val)
        row["validation_loss"] = problem.loss(data.y_val, validation, weights[1])
        row["validation_score"] = problem.score(data.y_val, validation)
    except Exception as e:
        return {**row, "status": f"failed: {_first_line(e)}"}
    state.fitted[request["key"]] = contender
    # what building left behind is kept out of the collections that would otherwise run
    # inside timed fits, until the last contender is finished
    state.heap.enter_context(state.timing.settled_heap())
    return row


def _time(request, state):
    """The duration in seconds of one fit of ``epochs`` epochs from the current weights,
    replied once this process is quiet again (``quiet_wait_gave_up`` when it did not
    become quiet in time)."""
    contender = state.fitted[request["key"]]
    seconds, gave_up = state.timing.timed_fit(contender, request["epochs"])
    return {"seconds": seconds, "quiet_wait_gave_up": gave_up}


def _count(request, state):
    """One fit of ``epochs`` epochs from the current weights, counted: callgrind's counts
    are zeroed right before the fit and dumped under ``label`` right after it (see
    ``ortbench.bench.instructions``; the worker runs under valgrind).

    Instrumentation is switched on at the first count and stays on until the next
    ``prepare`` or ``finish``: each switch makes valgrind translate again all the code
    that runs next, which costs a fit more time than its steps (not more instructions)."""
    start, stop, zero, dump = _client(request["client"])
    fit = state.fitted[request["key"]].continue_fit
    epochs, label = request["epochs"], request["label"].encode()
    if state.instrumented is None:
        start()
        state.instrumented = stop
    gc.collect()  # every counted fit starts with the collector's counts at zero
    zero()
    fit(epochs)
    dump(label)
    return {}


@functools.lru_cache
def _client(path):
    """The compiled callgrind client requests at ``path``: start, stop, zero and dump,
    looked up once (a first lookup inside a counted fit would be counted)."""
    import ctypes

    library = ctypes.CDLL(path)
    return tuple(
        getattr(library, f"ortbench_count_{name}") for name in ("start", "stop", "zero", "dump")
    )


def _finish(request, state):
    """The contender's loss curve and counters; the contender is released, and once none
    is left, what was kept out of garbage collection goes back into it."""
    state.uninstrumented()
    contender = state.fitted.pop(request["key"])
    if not state.fitted:
        state.heap.close()
    reply = {"loss_curve": [float(v) for v in contender.loss_curve_]}
    counts = contender.runtime_counts()
    if counts is not None:
        reply["runs_per_step"] = counts.runs_per_step
        reply["ortvalues_per_step"] = counts.ortvalues_per_step
    return reply


HANDLERS = {
    "hello": _hello,
    "prepare": _prepare,
    "time": _time,
    "count": _count,
    "finish": _finish,
}


def serve(timing_path, memory_path):
    """Answer requests until stdin closes, measuring with the files at ``timing_path``
    and ``memory_path``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator handles Ctrl-C
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    state = State(timing_path, memory_path)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = HANDLERS[request["command"]](request, state)
        except Exception as e:
            reply = {"error": _first_line(e)}
        channel.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    serve(*sys.argv[1:3])
