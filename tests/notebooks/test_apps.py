"""The marimo apps in ``notebooks/``: each runs as a script, exports to HTML without a cell
error, and renders in headless Chromium with every cell shown (screenshots are saved under
``reports/screenshots/``).

All of it runs in fast mode (``MEMLAB_NOTEBOOK_FAST=1``: hashing embedder, a subset of queries).
In ``marimo run`` a cell that raised is not rendered at all, so the browser test counts the
rendered cells against the cells of the file and reads the server's log for tracebacks.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
SCREENSHOTS = ROOT / "reports" / "screenshots"
MARIMO = Path(sys.executable).with_name("marimo")
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

# app -> (a heading its output must show, how many charts it draws at least)
APPS: dict[str, tuple[str, int]] = {
    "activation": ("Activation spread over the entity graph", 1),
    "tuning": ("Tune the retrieval constants", 2),
    "runs": ("Compare runs", 3),
    "timeline": ("One client's memory over time", 5),
}
ERROR_MARKERS = (
    '"type": "error"',
    "application/vnd.marimo+error",
    "application/vnd.marimo+traceback",
    "MarimoExceptionRaisedError",
)


def app_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        MEMLAB_NOTEBOOK_FAST="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        ANONYMIZED_TELEMETRY="False",
        MARIMO_SKIP_UPDATE_CHECK="1",
    )
    return env


def n_cells(app: str) -> int:
    return (NOTEBOOKS / f"{app}.py").read_text(encoding="utf-8").count("@app.cell")


@pytest.mark.parametrize("app", list(APPS))
def test_app_runs_as_a_script(app):
    res = subprocess.run(
        [sys.executable, str(NOTEBOOKS / f"{app}.py")],
        cwd=ROOT,
        env=app_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-4000:]


def export_html(
    app: str, tmp_path: Path, env: dict[str, str], timeout: int, *, cwd: Path = ROOT
) -> tuple[subprocess.CompletedProcess[str], str]:
    """``marimo export html`` of one app, run in ``cwd``: the finished process and the HTML
    it wrote."""
    out = tmp_path / f"{app}.html"
    res = subprocess.run(
        [str(MARIMO), "export", "html", "--no-include-code", str(NOTEBOOKS / f"{app}.py"),
         "-o", str(out)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return res, out.read_text(encoding="utf-8")


@pytest.mark.parametrize("app", list(APPS))
def test_app_exports_to_html_without_a_cell_error(app, tmp_path):
    _, html = export_html(app, tmp_path, app_env(), timeout=300)
    for marker in ERROR_MARKERS:
        assert marker not in html, f"{app}: the export holds {marker}"
    heading, charts = APPS[app]
    assert heading.replace("'", "&#x27;") in html or heading in html
    assert html.count("vnd.vegalite") >= charts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_server(port: int, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"marimo run exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"marimo run did not answer on port {port}")


_BOTTOM = (
    "Math.max(0, ...Array.from(document.querySelectorAll('.marimo-cell'))"
    ".map(e => e.getBoundingClientRect().bottom + window.scrollY))"
)


def _settle(page, charts: int) -> None:
    """Wait until the app draws ``charts`` charts and the page stops changing."""
    page.locator(".vega-embed").nth(charts - 1).wait_for(state="attached", timeout=120_000)
    last, stable = None, 0
    while stable < 4:
        sig = (page.evaluate("document.body.innerHTML.length"), page.locator(".vega-embed").count())
        stable = stable + 1 if sig == last else 0
        last = sig
        time.sleep(0.5)


def _screenshot(page, app: str) -> Path:
    height = page.evaluate(_BOTTOM)
    for _ in range(3):
        page.set_viewport_size({"width": 1280, "height": min(int(height) + 80, 12_000)})
        time.sleep(0.5)
        grown = page.evaluate(_BOTTOM)
        if grown <= height:
            break
        height = grown
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    final = SCREENSHOTS / f"{app}.png"
    tmp = final.with_name(f".{app}.tmp{os.getpid()}.png")
    page.screenshot(path=str(tmp), full_page=True)
    os.replace(tmp, final)
    return final


@contextlib.contextmanager
def _app_page(notebook: str, *app_args: str) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Serve ``notebooks/{notebook}.py`` with ``marimo run`` on loopback and open it in headless
    Chromium; yields ``(page, served)``. ``served["errors"]`` collects the page's errors and
    console errors while it is open; ``served["log"]`` is the server's output once it stopped."""
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is not installed (Debian package 'chromium')")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    port = _free_port()
    extra = ["--", *app_args] if app_args else []
    proc = subprocess.Popen(
        [str(MARIMO), "run", str(NOTEBOOKS / f"{notebook}.py"), "--headless", "--port",
         str(port), "--no-token", *extra],
        cwd=ROOT, env=app_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    served: dict[str, Any] = {"errors": [], "log": ""}
    try:
        _wait_for_server(port, proc)
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.on("pageerror", lambda exc: served["errors"].append(str(exc)))
                page.on(
                    "console",
                    lambda msg: served["errors"].append(msg.text) if msg.type == "error" else None,
                )
                page.goto(f"http://127.0.0.1:{port}/")
                yield page, served
            finally:
                browser.close()
    finally:
        proc.terminate()
        try:
            served["log"] = proc.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            served["log"] = proc.communicate()[0]


@pytest.mark.browser
@pytest.mark.parametrize("app", list(APPS))
def test_app_renders_in_headless_chromium(app):
    heading, charts = APPS[app]
    with _app_page(app) as (page, served):
        expected = n_cells(app)
        page.wait_for_function(
            f"document.querySelectorAll('.marimo-cell').length >= {expected}",
            timeout=120_000,
        )
        _settle(page, charts)
        text = page.locator("body").inner_text()
        rendered = page.locator(".marimo-cell").count()
        shot = _screenshot(page, app)
        final_text = page.locator("body").inner_text()
    log, page_errors = served["log"], served["errors"]
    assert rendered == expected, f"{app}: {rendered} of {expected} cells rendered\n{log}"
    assert heading in text
    for marker in ("Traceback", "An internal error", "MarimoExceptionRaisedError"):
        assert marker not in text + final_text, f"{app}: the page shows {marker}"
    assert page_errors == [], f"{app}: the browser reported errors: {page_errors}"
    assert "Traceback" not in log and "[E " not in log, log[-4000:]
    assert shot.stat().st_size > 10_000


def user_env() -> dict[str, str]:
    """The environment a user runs the apps in: no fast mode (MiniLM, every query)."""
    env = app_env()
    env.pop("MEMLAB_NOTEBOOK_FAST")
    return env


@pytest.mark.slow
@pytest.mark.parametrize("app", list(APPS))
def test_app_exports_in_the_mode_users_run(app, tmp_path):
    """``marimo export html`` as a user runs it: from another directory (a temporary one),
    with the real embedder and every query, the runs under ``reports/`` (trimmed copies such
    as ``reports/baseline``, which has no per-query files, included)."""
    res, html = export_html(app, tmp_path, user_env(), timeout=600, cwd=tmp_path)
    assert "some cells failed" not in res.stdout + res.stderr, (res.stdout + res.stderr)[-4000:]
    # A section that says what is missing stops its dependants with mo.stop; marimo records
    # those as "ancestor-stopped" outputs, which are not errors.
    errors = html.count('"type": "error"') - html.count('"ename": "ancestor-stopped"')
    assert errors == 0, f"{app}: the export holds {errors} cell error(s)"
    for marker in ERROR_MARKERS[1:]:
        assert marker not in html, f"{app}: the export holds {marker}"
    assert APPS[app][0] in html
    if app == "runs" and not (ROOT / "reports" / "baseline" / "per_query.parquet").exists():
        # The trimmed baseline run: the app names the files it lacks instead of failing.
        assert "lacks" in html and "per_query.parquet" in html


@pytest.mark.browser
def test_judge_app_saves_a_judgment_per_key_in_headless_chromium(tmp_path):
    import shutil

    dataset = tmp_path / "recording"
    shutil.copytree(ROOT / "tests" / "fixtures" / "recording", dataset)
    with _app_page("judge", "--dataset", str(dataset), "--judge", "ann") as (page, served):
        page.get_by_text("judged 0 of 12").wait_for(timeout=120_000)
        page.get_by_text("Query r1").first.wait_for(timeout=30_000)
        page.locator("body").click(position={"x": 5, "y": 5})
        page.keyboard.press("2")
        page.get_by_text("judged 1 of 12").wait_for(timeout=30_000)
        page.keyboard.press("s")
        page.keyboard.press("0")
        page.get_by_text("judged 2 of 12").wait_for(timeout=30_000)
        shot = _screenshot(page, "judge")
    log = served["log"]
    from memlab.judge.judgments import read_judgments

    got = [(j.qid, j.mem_id, j.grade, j.judge) for j in read_judgments(dataset)]
    # r1 serves m08, m01, m06: 2 on m08, skip m01, 0 on m06
    assert got == [("r1", "m08", 2, "ann"), ("r1", "m06", 0, "ann")], log[-3000:]
    assert "Traceback" not in log
    assert shot.stat().st_size > 10_000


def test_judge_app_runs_as_a_script():
    res = subprocess.run([sys.executable, str(NOTEBOOKS / "judge.py")], cwd=ROOT, env=app_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]


@pytest.mark.browser
def test_tuning_app_runs_a_change_and_saves_it_in_headless_chromium(tmp_path):
    """Set RRF k in the constants form, press Run, see the tuned scores, save them as TOML."""
    target = tmp_path / "hybrid-tuned.toml"
    with _app_page("tuning") as (page, served):
        page.get_by_text("Tuned: the defaults").first.wait_for(timeout=240_000)
        rrf = page.get_by_role("textbox", name="rrf__k")
        rrf.fill("30")
        rrf.press("Tab")
        page.get_by_role("button", name="Run").click()
        page.get_by_text("Tuned: rrf__k = 30").first.wait_for(timeout=240_000)
        table_text = page.locator("body").inner_text()
        assert "Replayed and scored in" in table_text
        save_as = page.get_by_role("textbox", name="save as")
        save_as.fill(str(target))
        save_as.press("Tab")
        page.get_by_role("button", name="Save settings as TOML").click()
        page.get_by_text("Saved").first.wait_for(timeout=60_000)
        _screenshot(page, "tuning-run")
    log = served["log"]
    from memlab.pipeline import load_pipeline

    saved = load_pipeline(target)
    assert (saved.name, saved.get_params()["rrf__k"]) == ("hybrid-tuned", 30.0), log[-3000:]
    assert "held-out" in table_text and "p_value" in table_text
    assert "Traceback" not in log


@pytest.mark.browser
def test_activation_app_takes_free_text_and_constants_in_headless_chromium():
    """Type a query, set the BFS hop decay and the LIF threshold, Apply: both charts redraw
    with the new constants, side by side, with colour scales to their real maxima."""
    with _app_page("activation") as (page, served):
        page.get_by_text("How propagation moved the relevant memories").first.wait_for(
            timeout=240_000
        )
        text = page.get_by_role("textbox", name="query text")
        text.fill("who runs the storefront for acme")
        text.press("Enter")
        page.get_by_text("free text at the time of").first.wait_for(timeout=120_000)
        for name, value in (("graph__hop_decay", "0.5"), ("lif__threshold", "2")):
            box = page.get_by_role("textbox", name=name)
            box.fill(value)
            box.press("Tab")
        page.get_by_role("button", name="Apply").click()
        page.get_by_text("graph__hop_decay = 0.5, lif__threshold = 2").first.wait_for(
            timeout=120_000
        )
        _settle(page, 1)
        body = page.locator("body").inner_text()
        shot = _screenshot(page, "activation-free-text")
    log = served["log"]
    assert "free text at the time of" in body and "who runs the storefront for acme" in body
    assert "No relevant memories for this query" in body
    assert "Cannot run these constants" not in body
    assert "Traceback" not in log, log[-3000:]
    assert shot.stat().st_size > 10_000


def test_tuning_app_shows_a_failing_stage_where_the_results_go(tmp_path):
    """A pipeline whose stage raises: the app names the stage, the query and the error in a
    callout instead of a blank panel (the export holds no cell error)."""
    config = tmp_path / "broken.toml"
    config.write_text(
        'name = "broken"\nsteps = ["bm25", "broken"]\n\n[bm25]\nstage = "bm25"\n\n'
        '[broken]\nstage = "_failing_stage:Broken"\n',
        encoding="utf-8",
    )
    env = app_env()
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).parent), env.get("PYTHONPATH", "")) if p
    )
    out = tmp_path / "tuning.html"
    res = subprocess.run(
        [str(MARIMO), "export", "html", "--no-include-code", str(NOTEBOOKS / "tuning.py"),
         "-o", str(out), "--", "--pipeline", str(config)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    html = out.read_text(encoding="utf-8")
    assert "broken failed with its defaults" in html
    assert "StageError: stage" in html and "(Broken) failed on query" in html
    assert "memory m-404 is not in the store" in html
    errors = html.count('"type": "error"') - html.count('"ename": "ancestor-stopped"')
    assert errors == 0, f"the export holds {errors} cell error(s)"


def test_judge_app_shows_a_pool_it_cannot_use_as_a_callout(tmp_path):
    """A pool naming a query the dataset does not hold: one callout, no cell error."""
    pool = tmp_path / "pool.jsonl"
    pool.write_text('{"qid": "zz", "mem_id": "m01", "position": 1, "runs": ["a"], '
                    '"best_rank": 1}\n', encoding="utf-8")
    out = tmp_path / "judge.html"
    res = subprocess.run(
        [str(MARIMO), "export", "html", "--no-include-code", str(NOTEBOOKS / "judge.py"),
         "-o", str(out), "--", "--pool", str(pool)],
        cwd=ROOT, env=app_env(), capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    html = out.read_text(encoding="utf-8")
    assert "Cannot open this dataset or pool" in html
    # the message as the export escapes it: "pool.jsonl:1: query 'zz' is not in the dataset"
    assert "pool.jsonl:1: query \\u0026#x27;zz\\u0026#x27; is not in the dataset" in html
    errors = html.count('"type": "error"') - html.count('"ename": "ancestor-stopped"')
    assert errors == 0, f"the export holds {errors} cell error(s)"
