"""The HTML report in a real browser: headless Chromium opens it from disk with the network unused.

Chromium logs every console message to stderr (``--enable-logging=stderr``), including the report's
own Content-Security-Policy refusing an external resource, so "no CONSOLE line" means: no script
error and nothing fetched from outside. Skipped only when no ``chromium`` binary is installed
(``.ci/run`` installs Debian's).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from recommender.outputs.htmlreport import render_html
from recommender.outputs.text import fleet_line
from tests import planfixture as pf

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.chromium,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--hide-scrollbars")


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(render_html(pf.plan(), pf.snapshot()), encoding="utf-8")
    return path


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.search(r":CONSOLE[(:]", line)]


def test_browser_renders_the_report(report: Path, tmp_path: Path) -> None:
    run = chromium(tmp_path, "--dump-dom", report.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    assert "GPU right-sizing report" in dom
    assert fleet_line(pf.plan()).replace("&", "&amp;") in dom  # the fleet summary
    assert dom.count("<svg") == 7  # fleet chart + one per workload + llama's demand forecast
    assert "a&lt;b&gt;&amp;\"c\"" in dom  # the nasty name stayed text
    assert not console_lines(run.stderr), console_lines(run.stderr)


def test_browser_logs_would_catch_an_external_resource(report: Path, tmp_path: Path) -> None:
    """The check above is live: the page's CSP turns an external image into a console message."""
    bad = tmp_path / "bad.html"
    bad.write_text(report.read_text(encoding="utf-8").replace("</main>", '<img src="https://example.invalid/x.png"></main>'),
                   encoding="utf-8")
    run = chromium(tmp_path, "--dump-dom", bad.as_uri())
    assert any("Content Security Policy" in line for line in console_lines(run.stderr)), run.stderr[-2000:]


def test_browser_screenshot(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    run = chromium(tmp_path, "--window-size=1280,2400", f"--screenshot={shot}", report.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
