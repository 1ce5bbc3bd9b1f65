"""What ``asv run`` in asv's own virtualenv measured, and the page ``asv publish`` made.

`.ci/run` runs a small selection of the suites the way asv's users do (asv builds its
virtualenv from ``asv.conf.json``: the wheel with the training extra, the newest onnx,
torch), publishes the results and points ``ORTBENCH_ASV`` at asv's folder (the one that
holds ``env``, ``results`` and ``html``). Without it these tests skip.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_browser import browser, open_page  # noqa: F401 (browser is a fixture)

from ortbench.report.resultsets import load_result_set
from ortbench.training.runtime.build import MAX_IR_VERSION

ASV = Path(os.environ.get("ORTBENCH_ASV", "")) if os.environ.get("ORTBENCH_ASV") else None
pytestmark = pytest.mark.skipif(
    ASV is None, reason="set ORTBENCH_ASV to the folder of an `asv run` and `asv publish`"
)
#: The cells `.ci/run` selects: the engine's trainers on the MLP at batch 15, and the
#: scikit-learn reference they must follow step for step.
ENGINE = ("ort-full", "ort-fwbw")
REFERENCE = "sklearn-mlp-sgd"
TIME = "bench_training.TimeEpoch.time_epoch"
LOSS = "bench_training.FinalLoss.track_final_loss"


def cell(name: str) -> str:
    return f"contender='{name}', problem='mlp', batch_size=15, device='cpu'"


@pytest.fixture(scope="module")
def measured() -> dict:
    files = [p for p in (ASV / "results").glob("*/*.json") if p.name != "machine.json"]
    assert len(files) == 1, files  # one commit in one environment
    return load_result_set(files[0]).measurements


def test_asv_environment_has_an_onnx_newer_than_the_runtime_reads():
    """The trainers below ran beside an onnx that writes IR versions onnxruntime-training
    1.19.2 refuses, so the lowering was needed."""
    (python,) = (ASV / "env").glob("*/bin/python")
    script = "import json, onnx, onnxruntime; print(json.dumps([onnx.IR_VERSION, onnxruntime.__version__]))"
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, check=True)
    ir_version, runtime = json.loads(done.stdout)
    assert ir_version > MAX_IR_VERSION and runtime == "1.19.2"


def test_engine_trained_in_asv_environment_as_scikit_learn_does(measured):
    """Both trainers follow one trajectory (the same shuffled batches), and reach the loss
    scikit-learn reaches on its own shuffling of the same data."""
    full, fwbw = (measured[(LOSS, cell(name))].value for name in ENGINE)
    assert math.isclose(full, fwbw, rel_tol=1e-5)
    assert math.isclose(full, measured[(LOSS, cell(REFERENCE))].value, rel_tol=1e-2)
    for name in ENGINE:
        assert measured[(TIME, cell(name))].value > 0, name


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def site():
    handler = partial(_QuietHandler, directory=str(ASV / "html"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_published_graph_holds_the_engine_cells():
    """``asv publish`` wrote the benchmark's graph, with a point for each engine cell."""
    index = json.loads((ASV / "html" / "index.json").read_text())
    params = index["benchmarks"][TIME]["params"]
    cells = list(itertools.product(*params))
    (graph,) = [
        p for p in (ASV / "html" / "graphs").rglob(f"{TIME}.json") if "summary" not in p.parts
    ]
    ((_, values),) = json.loads(graph.read_text())  # one commit
    for name in ENGINE:
        position = cells.index((repr(name), "'mlp'", "15", "'cpu'"))
        assert values[position] > 0, name


def test_published_page_draws_the_benchmark_graph(browser, site):  # noqa: F811
    """asv's page lists the benchmark, and its graph plots the engine's measured cells."""
    from selenium.webdriver.support.ui import WebDriverWait

    open_page(browser, f"{site}/index.html")
    if not browser.execute_script("return typeof jQuery !== 'undefined'"):
        pytest.skip("asv's page loads jQuery, flot and bootstrap from CDNs, out of reach here")
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script(
            "return document.getElementById(arguments[0]) !== null", f"summarygrid-{TIME}"
        )
    )
    open_page(browser, f"{site}/index.html#{TIME}")
    plotted = """
        const plot = $('#main-graph').data('plot');
        if (!plot || !$('#main-graph canvas.flot-base').length) return null;
        return plot.getData().filter(s => s.data.some(p => p[1] !== null)).map(s => s.label);
    """
    labels = WebDriverWait(browser, 30).until(lambda d: d.execute_script(plotted))
    for name in ENGINE:
        assert any(name in label for label in labels), (name, labels)
