"""One side of an A/B run: a process that fits and times that side's contenders on request.

The coordinator (:mod:`ortbench.bench.ab`) starts this file's source with ``python -c``
in the side's checkout, with that checkout first on the path, so ``ortbench`` here is the
side's own code: its contenders, problems and training engine. What this file itself
does (the timing, the scores, the protocol) comes from the coordinator's version, so
both sides are measured the same way. It therefore only uses what every version of
ortbench has: ``make_problem``, ``make_contender`` and the contender interface.

Protocol: one JSON object per line on stdin, one reply per line on the channel (the
original stdout; anything a library prints goes to stderr, the side's log). Replies
carry ``error`` when the request failed. The process ends at the end of its input.
"""

import functools
import gc
import json
import os
import signal
import sys
import time


def _first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _hello(request, fitted):
    """Where the side's ortbench was imported from, its versions and the machine (none
    when the side has no ``ortbench.bench.machine`` to tell them)."""
    import ortbench

    try:
        from ortbench.bench import machine

        context = {**machine.versions(), **machine.machine()}
    except (ImportError, AttributeError):
        context = {}
    return {"ortbench": os.path.dirname(ortbench.__file__), "context": context}


def _prepare(request, fitted):
    """Build the contender of one cell, fit it once, score it (the row's columns)."""
    from ortbench.bench.contenders import Unavailable, make_contender
    from ortbench.bench.problems import make_problem

    cell = request["cell"]
    kwargs = {} if request["n_samples"] is None else {"n_samples": request["n_samples"]}
    problem = make_problem(cell["problem"], cell["dataset"], **kwargs)
    epochs = request["epochs"]
    row = {"steps": epochs * problem.steps_per_epoch(cell["batch_size"]), "status": "ok"}
    try:
        contender = make_contender(cell["contender"], problem, cell["batch_size"], cell["device"])
    except Unavailable as e:
        return {**row, "status": f"unavailable: {e}"}
    except ValueError as e:  # a contender this side does not have
        return {**row, "status": f"unavailable: {_first_line(e)}"}
    data = problem.data
    try:
        row["initial_loss"] = problem.loss(data.y_train, contender.predict(data.X_train))
        contender.fit(epochs)
        row["final_train_loss"] = contender.loss_curve_[-1]
        validation = contender.predict(data.X_val)
        row["validation_loss"] = problem.loss(data.y_val, validation)
        row["validation_score"] = problem.score(data.y_val, validation)
    except Exception as e:
        return {**row, "status": f"failed: {_first_line(e)}"}
    fitted[request["key"]] = contender
    # what building left behind is collected now and kept out of the collections that
    # would otherwise run inside timed fits, as bench does (``settled_heap``)
    gc.collect()
    gc.freeze()
    _wait_until_quiet()
    return row


def _wait_until_quiet(window=0.005, limit=1.0):
    """Sleep until no thread of this process runs (the CPU time grows by under a tenth
    of ``window`` in a window), at most ``limit`` seconds: BLAS and OpenMP threads keep
    spinning after a fit, and the other side's next fit must not share the cores with
    them. ``bench`` does the same (``contenders.base.wait_until_quiet``); this file
    cannot import it, since the side's ortbench may be older. False when it gave up."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        cpu = time.process_time()
        time.sleep(window)
        if time.process_time() - cpu < window / 10:
            return True
    return False


def _time(request, fitted):
    """The duration in seconds of one fit of ``epochs`` epochs from the current weights,
    replied once this process is quiet again (``quiet_wait_gave_up`` when it did not
    become quiet in time)."""
    contender = fitted[request["key"]]
    start = time.perf_counter()
    contender.continue_fit(request["epochs"])
    seconds = time.perf_counter() - start
    if not _wait_until_quiet():
        return {"seconds": seconds, "quiet_wait_gave_up": True}
    return {"seconds": seconds}


def _count(request, fitted):
    """One fit of ``epochs`` epochs from the current weights with callgrind's
    instrumentation on around it only, its counts dumped under ``label`` (see
    ``ortbench.bench.instructions``; the worker runs under valgrind)."""
    start, stop, dump = _client(request["client"])
    fit = fitted[request["key"]].continue_fit
    epochs, label = request["epochs"], request["label"].encode()
    gc.collect()  # every counted fit starts with the collector's counts at zero
    start()
    fit(epochs)
    stop()
    dump(label)
    return {}


@functools.lru_cache
def _client(path):
    """The compiled callgrind client requests at ``path``: start, stop and dump, looked up
    once (a first lookup inside a counted fit would be counted)."""
    import ctypes

    library = ctypes.CDLL(path)
    return library.ortbench_count_start, library.ortbench_count_stop, library.ortbench_count_dump


def _finish(request, fitted):
    """The contender's loss curve and counters; the contender is released, and once none
    is left, what was kept out of garbage collection goes back into it."""
    contender = fitted.pop(request["key"])
    if not fitted:
        gc.unfreeze()
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


def serve():
    """Answer requests until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator handles Ctrl-C
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    fitted = {}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = HANDLERS[request["command"]](request, fitted)
        except Exception as e:
            reply = {"error": _first_line(e)}
        channel.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    serve()
