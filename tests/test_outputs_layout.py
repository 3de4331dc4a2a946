"""The demo HTML report on a laptop screen (headless Chromium, 1,280 px wide): every column of the
workloads table within reach, workload names broken only after a separator, no two chart labels on
top of each other.

The page itself runs no script (its Content-Security-Policy forbids it), so the test opens a copy with
the policy removed and a probe script appended; the probe writes the geometry it measured into the DOM,
which ``--dump-dom`` hands back. Skipped only when no ``chromium`` binary is installed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

from tests.test_outputs_chromium import CHROMIUM, chromium

pytestmark = [
    pytest.mark.chromium,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
]
WIDTH = 1280
SEPARATORS = "/-._"
PROBE = Path(__file__).with_name("layoutprobe.js")


@pytest.fixture(scope="module")
def demo_html(tmp_path_factory: pytest.TempPathFactory) -> str:
    run = subprocess.run([sys.executable, "-c", "from recommender.cli.main import main; main()",
                          "report", "--demo", "-f", "html"], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def measure(page: str, tmp: Path) -> dict:
    """Open ``page`` with the probe at 1,280 px; the geometry it wrote."""
    probed = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)
    probed = probed.replace("</body>", f"<script>{PROBE.read_text(encoding='utf-8')}</script></body>")
    path = tmp / "probed.html"
    path.write_text(probed, encoding="utf-8")
    run = chromium(tmp, f"--window-size={WIDTH},2400", "--dump-dom", path.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', run.stdout, flags=re.S)
    assert found, run.stdout[-2000:]
    geometry = json.loads(unescape(found.group(1)))
    assert geometry["viewport"] == WIDTH
    return geometry


@pytest.fixture(scope="module")
def geometry(demo_html: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return measure(demo_html, tmp_path_factory.mktemp("layout"))


def test_every_column_of_the_workloads_table_is_on_screen(geometry: dict) -> None:
    cells = geometry["cells"]
    assert len(cells) > 16 * 5  # the probe saw the table: 16 workloads
    off = [c for c in cells if c["right"] > geometry["viewport"] + 0.5]
    assert not off, off[:5]
    clipped = [c for c in cells if c["right"] > geometry["container_right"] + 0.5]
    assert not clipped, clipped[:5]  # nothing hidden behind the table's own scroll box either


def test_names_break_only_after_a_separator(geometry: dict) -> None:
    names = geometry["names"]
    assert len(names) == 2 * 16  # namespace and kind/name of each workload
    broken = [(n["text"], n["breaks"]) for n in names
              if any(i == 0 or n["text"][i - 1] not in SEPARATORS for i in n["breaks"])]
    assert not broken, broken


def test_no_two_chart_labels_overlap(geometry: dict) -> None:
    assert geometry["charts"] >= 7 and geometry["labels"] > 100  # the probe read the charts' text
    assert not geometry["overlaps"], geometry["overlaps"][:5]


def test_the_probe_sees_what_the_issue_reported(demo_html: str, tmp_path: Path) -> None:
    """The three checks are live: the issue's layout (a wide table whose names break anywhere, charts
    with labels on each other) fails each of them."""
    bad_css = "main { max-width: none; } td.name { overflow-wrap: anywhere; word-break: break-all; min-width: 0; }"
    bad = demo_html.replace("</style>", bad_css + "\n</style>", 1)
    bad = bad.replace("<table>", '<table style="min-width: 1600px">', 1)
    bad = re.sub(r"<wbr>", "", bad)
    overlap = '<text x="10" y="20">overlap</text><text x="12" y="22">overlap</text></svg>'
    bad = bad.replace("</svg>", overlap, 1)
    geometry = measure(bad, tmp_path)
    assert any(c["right"] > geometry["viewport"] for c in geometry["cells"])
    assert any(i and n["text"][i - 1] not in SEPARATORS for n in geometry["names"] for i in n["breaks"])
    assert geometry["overlaps"]
