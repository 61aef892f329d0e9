"""The HTML report in a real browser: Debian's headless Chromium driven by Playwright for Python.

The page must load offline with no console error, show one row per core unit,
show a bar's details on hover, zoom and pan, and a screenshot is written.  CI
installs /usr/bin/chromium (.ci/run); set DSPSIM_NO_BROWSER=1 to skip where no
browser can be had.  Playwright's own browser downloads are never used.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import sim
from sim.inspect.trace import track_name, tracks
from sim.report.page import report_html

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if os.environ.get("DSPSIM_NO_BROWSER") == "1":
    pytest.skip("DSPSIM_NO_BROWSER=1: the report's browser test is switched off", allow_module_level=True)


def _bn_run() -> sim.Run:
    m = sim.Simulator("FT78NE")
    rng = np.random.default_rng(3)
    batch, channel = 64, 1024
    m.write(0xA0000000, rng.standard_normal((batch, channel)).astype(np.float32))
    m.write(0xA8000000, rng.standard_normal((batch, channel)).astype(np.float32))
    for a in (0xC0000000, 0xC0100000, 0xC0200000):
        m.write(a, rng.uniform(0.5, 1.5, channel).astype(np.float32))
    return m.call("fp_batch_norm_grad_s", x=0xA0000000, dy=0xA8000000, dx=0xB0000000,
                  params=[0xC0000000, 0xC0100000, 0xC0200000, 0xC0300000, 0xC0400000, batch, channel, 1])


@pytest.fixture(scope="module")
def run() -> sim.Run:
    return _bn_run()


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[test]' (or set DSPSIM_NO_BROWSER=1)")
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does), or set DSPSIM_NO_BROWSER=1")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser, run, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(report_html(run), encoding="utf-8")
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = ctx.new_page()
    problems: list[str] = []
    outside: list[str] = []
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
          else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()
    pg.route("**/*", route)
    pg.goto(path.as_uri())
    pg.wait_for_selector("rect.bar")
    pg.problems, pg.outside = problems, outside
    yield pg
    ctx.close()


def _view(pg) -> tuple[float, float]:
    a, b = pg.get_attribute("#tl-svg", "data-view").split(",")
    return float(a), float(b)


def test_page_loads_offline_without_console_errors(page, run):
    assert page.title() == f"dspsim report: {run.symbol} on {run.target.name}"
    assert page.problems == [] and page.outside == []
    for section in ("#summary-table", "#roofline", "#layout-table", "#stalls-table"):
        assert page.locator(section).count() == 1
    assert page.locator("#summary-table tbody tr").count() == len(run.cores)
    assert page.locator("#roofline circle.point").count() >= 1


def test_one_row_per_core_unit(page, run):
    labels = page.locator(".row-label").all_inner_texts()
    assert labels == [track_name(c, u) for c, u in tracks(run.events)]
    assert len(labels) == 8 * 4  # compute, DMA 0, DMA 1, sync on each of 8 cores
    # Every row has a bar at full view, each drawn inside its own row.
    ys = page.eval_on_selector_all("rect.bar", "rs => rs.map(r => +r.getAttribute('y'))")
    rows = {int((y - 34) // 18) for y in ys}
    assert rows == set(range(len(labels)))


def test_hovering_a_bar_shows_its_details(page, run, tmp_path):
    assert page.locator("#tooltip").is_hidden()
    bar = page.locator("rect.bar.k-dma_in").first
    idx = int(bar.get_attribute("data-e"))
    ev = page.evaluate(f"JSON.parse(document.getElementById('run-data').textContent).events[{idx}]")
    bar.hover()
    tip = page.locator("#tooltip")
    assert tip.is_visible()
    text = tip.inner_text()
    assert f"tile {ev[4]}" in text and f"{ev[5]:,}" in text and ev[6] in text and ev[7] in text
    assert f"{ev[2]:,} – {ev[3]:,} ({ev[3] - ev[2]:,} cycles" in text
    assert "source" in text and "destination" in text and "(ddr)" in text and "(am)" in text
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    page.mouse.move(5, 5)
    assert tip.is_hidden()


def test_zoom_and_pan(page, run):
    full = _view(page)
    assert full == (0.0, float(run.cycles))
    box = page.locator("#plot").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 100)
    page.mouse.wheel(0, -600)
    view = f"{full[0]:.3f},{full[1]:.3f}"
    page.wait_for_function(f"document.getElementById('tl-svg').getAttribute('data-view') !== '{view}'")
    z0, z1 = _view(page)
    assert z1 - z0 < (full[1] - full[0]) / 2 and 0 <= z0 < z1 <= full[1]
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2 + 200, box["y"] + 100, steps=4)
    page.mouse.up()
    p0, p1 = _view(page)
    assert p0 < z0 and p1 - p0 == pytest.approx(z1 - z0)
    page.click("#zoom-reset")
    assert _view(page) == full
    page.click("#zoom-in")
    a, b = _view(page)
    assert b - a == pytest.approx((full[1] - full[0]) / 2)
    assert page.problems == []


def test_a_program_page_draws_its_calls_above_the_cores_and_names_them_on_hover(browser, tmp_path):
    from sim.program import load_program, run_program
    from sim.program.report import program_report_html

    root = Path(__file__).resolve().parent.parent
    src = tmp_path / "chain.yaml"
    src.write_text(f"target: FT78NE\nkernels: [{root / 'examples' / 'relu_grad.py'}, "
                   f"{root / 'examples' / 'binary_elementwise.py'}]\n"
                   "tensors:\n  - {name: dy, shape: [4, 64], dtype: float32}\n"
                   "  - {name: x, shape: [4, 64], dtype: float32}\n  - {name: g, shape: [4, 64], dtype: float32}\n"
                   "  - {name: y, shape: [4, 64], dtype: float32}\n"
                   "data:\n  - {tensor: dy, random: {seed: 1}}\n  - {tensor: x, random: {seed: 2}}\n"
                   "calls:\n  - {name: relu, symbol: fp_relu_grad_s, args: {dy: dy, x: x, dx: g, shape: [4, 64]}}\n"
                   "  - {name: add, symbol: fp_binary_elementwise_s, args: {a: g, b: dy, out: y, shape: [4, 64], "
                   "op: add}}\n")
    program = load_program(src, allow_kernels=True)
    path = tmp_path / "program.html"
    path.write_text(program_report_html(run_program(program), "", src), encoding="utf-8")
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        pg = ctx.new_page()
        problems: list[str] = []
        pg.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        pg.on("pageerror", lambda e: problems.append(str(e)))
        pg.goto(path.as_uri())
        pg.wait_for_selector("rect.bar")
        assert problems == []
        assert pg.locator(".row-label").all_inner_texts()[0] == "calls"
        first = pg.locator("rect.bar").first  # the first call's span: row 0
        assert int((float(first.get_attribute("y")) - 34) // 18) == 0
        first.hover()
        assert "relu" in pg.locator("#tooltip").inner_text()
    finally:
        ctx.close()
