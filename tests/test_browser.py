"""The bench, profile and compare pages in a real browser: headless Chromium through selenium.

At 1,400 px wide no page scrolls sideways, every image loads, the flame graph is there and
drawn, and the browser logs no error. Skipped, with the reason, where Chromium, its driver
or selenium is missing (``.ci/run`` installs them). With ``ORTBENCH_SCREENSHOTS=<folder>``
the test also saves a PNG of each page there (the README's screenshots).
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import tempfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from ortbench.bench.store import COLUMNS, ResultsWriter
from ortbench.cli import main

WIDTH = 1400
#: Screenshots stop at this height: the top of a long page is what a reader sees first.
SCREENSHOT_HEIGHT = 4000
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _chromium() -> tuple[str, str]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    assert webdriver
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip("Chromium is not installed (apt-get install chromium chromium-driver)")
    return browser, driver


@pytest.fixture(scope="module")
def browser():
    binary, driver_path = _chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={WIDTH},1000")
    options.binary_location = binary
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


#: The contenders of the run with two model sizes.
TWO_SIZE_CONTENDERS = ("sklearn-mlp-sgd", "ort-fwbw", "ort-portable-full")
#: HEAD's time per step over BASE's, per contender, in the compare page's two run folders.
CHANGES = {"ort-full": 1.0, "ort-fwbw": 2.0, "ort-fwbw-nesterov": 0.75}


def _run_folder(folder: Path, head: bool) -> Path:
    """A bench run folder of three contenders at two batch sizes, 10 samples with 2% noise."""
    rng = np.random.RandomState(0)  # the same noise on both sides: ratios are exact
    writer = ResultsWriter(folder)
    for batch_size, contender in itertools.product((15, 256), CHANGES):
        base = 1e-4 * batch_size**0.5
        samples = base * (CHANGES[contender] if head else 1.0) * (1 + 0.02 * rng.randn(10))
        row = dict.fromkeys(COLUMNS, math.nan)
        row.update(
            run_id=folder.name, contender=contender, problem="mlp",
            dataset="make_regression", batch_size=batch_size, device="cpu", status="ok",
            seconds_per_step=float(np.median(samples)), runs_per_step=2.0,
            ortvalues_per_step=0.0,
        )  # fmt: skip
        writer.append(row, [float(s) for s in samples], [])
    return folder


@pytest.fixture(scope="module")
def site(browser, tmp_path_factory):
    """The three pages under one folder, served over HTTP on this machine only."""
    root = tmp_path_factory.mktemp("site")
    # screenshots show a whole --quick run and a default profile; the checks need less
    short = not os.environ.get("ORTBENCH_SCREENSHOTS")
    bench_options = ["--repeat", "3", "--epochs", "1"] if short else []
    # a cell timed as unstable on a loaded machine still has its page
    bench_options.append("--keep-going")
    assert main(["bench", "--quick", *bench_options, "--out", str(root / "bench")]) == 0
    (bench,) = (root / "bench").iterdir()
    sizes = ["--hidden", "50,10", "256,128", "--problem", "mlp", "--batch-sizes", "16", "256"]
    sizes += ["--contenders", *TWO_SIZE_CONTENDERS, *bench_options]
    assert main(["bench", *sizes, "--out", str(root / "sizes")]) == 0
    (two_sizes,) = (root / "sizes").iterdir()
    profile_options = ["--epochs", "30"] if short else []
    assert main(["profile", "ort-fwbw", *profile_options, "--out", str(root / "profile")]) == 0
    (profile,) = (root / "profile").iterdir()
    before, after = _run_folder(root / "base", False), _run_folder(root / "head", True)
    assert main(["compare", str(before), str(after), "--html", str(root / "compare.html")]) == 1
    handler = partial(_QuietHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield {
        "bench": f"{url}/bench/{bench.name}/index.html",
        "bench_folder": bench,
        "two_sizes": f"{url}/sizes/{two_sizes.name}/index.html",
        "two_sizes_folder": two_sizes,
        "profile": f"{url}/profile/{profile.name}/index.html",
        "profile_folder": profile,
        "compare": f"{url}/compare.html",
    }
    server.shutdown()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def open_page(browser, url: str):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get_log("browser")  # drop what earlier pages logged
    browser.set_window_size(WIDTH, 1000)
    browser.get(url)
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script(
            "return document.readyState === 'complete' && "
            "[...document.images].every(i => i.complete)"
        )
    )


def _check_page(browser, name: str) -> None:
    titles = browser.execute_script(
        "return [...document.querySelectorAll('h1')].map(h => h.textContent)"
    )
    assert len(titles) == 1, titles
    headings = browser.execute_script(
        "return [...document.querySelectorAll('h2, h3, h4')].map(h => h.textContent)"
    )
    run = titles[0].split(": run ")[-1].split(" vs ")[0]
    assert not [h for h in headings if run in h], headings  # the title said once
    widths = browser.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], f"the {name} page scrolls sideways: {widths}"
    broken = browser.execute_script(
        "return [...document.images].filter(i => !i.naturalWidth).map(i => i.src)"
    )
    assert not broken, broken
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    folder = os.environ.get("ORTBENCH_SCREENSHOTS")
    if folder:
        height = browser.execute_script("return document.documentElement.scrollHeight")
        # the window's own bars take some of its height: the page gets all of what is asked
        bars = 1000 - browser.execute_script("return window.innerHeight")
        browser.set_window_size(WIDTH, min(height, SCREENSHOT_HEIGHT) + bars)
        Path(folder).mkdir(parents=True, exist_ok=True)
        path = Path(folder) / f"{name}-page.png"
        browser.save_screenshot(str(path))
        with Image.open(path) as shot:  # 256 colors: a few hundred KB, text still sharp
            shot.quantize(256).save(path, optimize=True)


def _times(ratio: float) -> str:
    return f"{ratio:.1f}x" if ratio < 10 else f"{ratio:.0f}x"


def _expected_conclusions(folder: Path) -> list[tuple[set, list[str]]]:
    """Per data set and model size, from results.csv: the fastest contender at each batch
    size and the smallest and largest speed-up of those over scikit-learn's MLP (a cell
    whose slope came out non-positive on a loaded machine measures nothing: left out)."""
    results = pd.read_csv(folder / "results.csv")
    results = results[(results.status == "ok") & (results.seconds_per_step > 0)]
    expected = []
    for _, group in results.groupby(["dataset", "device", "trained_values"]):
        names, ratios = set(), []
        for _, cells in group.groupby("batch_size"):
            times = cells.set_index("contender").seconds_per_step
            names.add(times.idxmin())
            if "sklearn-mlp-sgd" in times:
                ratios.append(times["sklearn-mlp-sgd"] / times.min())
        expected.append(
            (names, sorted({_times(min(ratios)), _times(max(ratios))} if ratios else ()))
        )
    return expected


def _bench_structure(browser) -> dict:
    return browser.execute_script(
        """
        const top = e => e.getBoundingClientRect().top + window.scrollY;
        const method = [...document.querySelectorAll('p, li')]
          .filter(p => p.textContent.includes('slope between'));
        return {
          tables: [...document.querySelectorAll('table')].map(t => ({
            heads: [...t.querySelectorAll('thead th')].map(h => h.textContent),
            rows: [...t.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.textContent)),
            section: t.closest('section') ? t.closest('section').querySelector('h2').textContent : '',
            top: top(t)})),
          figures: [...document.querySelectorAll('figure')].map(f => ({
            image: f.querySelector('img').src.split('/').pop(),
            caption: f.querySelector('figcaption').textContent, top: top(f)})),
          conclusions: [...document.querySelectorAll('.conclusion')].map(c => ({
            text: c.textContent, top: top(c)})),
          method: method.length,
          methodOutside: method.filter(p => !p.closest('details')).length,
          details: [...document.querySelectorAll('details')].map(top),
        };
        """
    )


def _check_bench_structure(browser, folder: Path, sizes: int) -> dict:
    page = _bench_structure(browser)
    # every (section, batch size, contender) shows in one table row only
    seen = []
    cells = [  # the timed cells' tables (a loaded machine may add a table of cells without a measurement)
        t
        for t in page["tables"]
        if {"batch size", "contender"} <= set(t["heads"])
        and any(h.startswith("time per step") for h in t["heads"])
    ]
    assert len(cells) == sizes, [t["section"] for t in cells]
    for table in cells:
        where = [table["heads"].index("batch size"), table["heads"].index("contender")]
        seen += [(table["section"], *(row[k] for k in where)) for row in table["rows"]]
    assert len(seen) == len(set(seen)), "a table is repeated"
    ok = pd.read_csv(folder / "results.csv").query("status == 'ok'")
    assert len(seen) == len(ok)
    for table in cells:  # memory and counters in the same table, the score named
        assert {"peak memory (MB)", "new OrtValues per step", "validation R²"} <= set(
            table["heads"]
        ), table["heads"]
    # the answer first: one conclusion per data set and size, computed from the results
    conclusions = page["conclusions"]
    expected = _expected_conclusions(folder)
    assert len(conclusions) == len(expected) == sizes
    for conclusion, (names, ratios) in zip(conclusions, expected):
        text = conclusion["text"]
        assert "fastest" in text and all(name in text for name in names), (text, names)
        assert all(f" {ratio}" in text for ratio in ratios), (text, ratios)
    # the method folded at the end
    assert page["method"] >= 1 and page["methodOutside"] == 0
    figures = page["figures"]
    assert all(len(f["caption"].split()) > 4 and f["caption"].endswith(".") for f in figures)
    order = [
        max(c["top"] for c in conclusions),
        min(t["top"] for t in cells),
        max(t["top"] for t in cells),
        min(f["top"] for f in figures),
        max(f["top"] for f in figures),
        max(page["details"]),
    ]
    assert order == sorted(order), order
    return page


def test_bench_page(browser, site):
    open_page(browser, site["bench"])
    images = browser.execute_script(
        "return [...document.images].map(i => [i.src.split('/').pop(), i.clientWidth])"
    )
    names = {name for name, _ in images}
    assert {"loss_curves.png", "seconds_per_step.png", "speedup.png"} <= names
    assert all(width >= 1000 for _, width in images), images  # plots shown large
    headers = browser.execute_script(
        "return [...document.querySelectorAll('table.results th')].map(h => h.textContent)"
    )
    assert "time per step (µs, median)" in headers
    title = browser.execute_script("return document.querySelector('h1').textContent")
    assert title == f"ortbench bench: run {site['bench_folder'].name}"
    page = _check_bench_structure(browser, site["bench_folder"], sizes=1)
    assert "scaling.png" not in [f["image"] for f in page["figures"]]  # one model size
    _check_page(browser, "bench")


def test_bench_page_of_two_model_sizes(browser, site):
    open_page(browser, site["two_sizes"])
    page = _check_bench_structure(browser, site["two_sizes_folder"], sizes=2)
    assert [f["image"] for f in page["figures"]].count("scaling.png") == 1
    _check_page(browser, "two-sizes")


def test_profile_page(browser, site):
    open_page(browser, site["profile"])
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:  # py-spy's SVG draws its frames once loaded
        WebDriverWait(browser, 30).until(
            lambda d: d.execute_script(
                "const o = document.querySelector('object.flamegraph');"
                "return o && o.contentDocument && "
                "o.contentDocument.querySelectorAll('#frames > g').length > 10"
            )
        )
    except TimeoutException:
        pytest.fail("the flame graph is not on the page, or not drawn")
    height = browser.execute_script(
        "return document.querySelector('object.flamegraph').getBoundingClientRect().height"
    )
    assert height > 100
    opened = browser.execute_script(
        "return document.querySelectorAll('.calltree details[open]').length"
    )
    assert opened > 3
    title = browser.execute_script("return document.querySelector('h1').textContent")
    assert title == f"ortbench profile: run {site['profile_folder'].name}"
    _check_page(browser, "profile")


def test_compare_page(browser, site):
    open_page(browser, site["compare"])
    verdicts = browser.execute_script(
        "return [...document.querySelectorAll('table.verdicts tr')].filter(r => r.cells[0]"
        " && r.textContent.includes('seconds_per_step')).map(r => "
        "[r.cells[0].childNodes[1].textContent.trim(), r.cells[2].textContent.split(',')[0], r.cells[5].textContent])"
    )
    assert sorted(verdicts) == [
        ["improved", "contender=ort-fwbw-nesterov", "0.75"],
        ["improved", "contender=ort-fwbw-nesterov", "0.75"],
        ["regressed", "contender=ort-fwbw", "2.00"],
        ["regressed", "contender=ort-fwbw", "2.00"],
        ["unchanged", "contender=ort-full", "1.00"],
        ["unchanged", "contender=ort-full", "1.00"],
    ]
    dots = browser.execute_script("return document.querySelectorAll('svg.strip circle').length")
    assert dots == 6 * 2 * 10  # BASE's and HEAD's samples of each timed cell
    title = browser.execute_script("return document.querySelector('h1').textContent")
    assert title == "ortbench compare: run base vs run head"
    _check_page(browser, "compare")
