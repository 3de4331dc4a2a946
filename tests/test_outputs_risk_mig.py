"""Risk with its reason, and the per-node MIG plan, in every report format; every format agrees.

Issue 38: the demo's top saving (translate) is risk high because its memory upper bound exceeds the slice,
yet the table showed no risk and no format said why; the MIG node plan (per-GPU layout, the
``nvidia.com/mig.config`` label, the mig-parted config) was in the JSON only. Each format is parsed back
here (by its stable labels: ``risk``, ``GPU 0:``/``GPUs 2–3:``, ``MIG disabled``) and compared with the
plan, on the demo and on the hand-made plan fixture (which has a pseudo node whose name must be escaped).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from collectors.files import read_snapshot
from policies.rightsize import assess_risk
from recommender.cli.main import main
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Allocation, Sharing
from recommender.core.plan import Bound, NodeMigPlan, Plan
from recommender.core.settings import Settings
from recommender.core.usage import Snapshot
from recommender.demo import demo_path
from recommender.mechanisms.mig import MigShare
from recommender.outputs import get_formatter
from recommender.outputs.csvfmt import mig_files
from recommender.outputs.table import render_table
from recommender.pipeline.run import run_once
from tests import planfixture as pf

Layouts = dict[str, list[dict[str, int]]]  # node -> per-GPU {profile: count}, in GPU index order
TRANSLATE = "chat/Deployment/translate"


@pytest.fixture(scope="module")
def demo() -> tuple[Plan, Snapshot]:
    snap = read_snapshot(demo_path())
    return run_once(snap, Settings(), snap.end), snap


@pytest.fixture(scope="module", params=["demo", "fixture"])
def case(request: pytest.FixtureRequest, demo: tuple[Plan, Snapshot]) -> tuple[Plan, Snapshot]:
    return demo if request.param == "demo" else (pf.plan(), pf.snapshot())


# -- the plan: risk is explained where it is decided ----------------------------------------------

def test_demo_translate_is_high_risk_and_says_why(demo: tuple[Plan, Snapshot]) -> None:
    rec = next(r for r in demo[0].recommendations if r.ref.key == TRANSLATE)
    assert rec.risk == "high"
    assert rec.recommended is not None and rec.memory_need_mib is not None
    device = rec.recommended.device_memory_mib
    assert device is not None and rec.memory_need_mib.upper > device
    why = " ".join(rec.risk_reasons)
    assert "upper bound" in why and f"{rec.memory_need_mib.upper:,.0f} MiB" in why and f"{device:,.0f} MiB" in why


def test_every_recommendation_on_the_demo_says_why_its_risk(demo: tuple[Plan, Snapshot]) -> None:
    for rec in demo[0].recommendations:
        assert rec.risk in ("low", "medium", "high")
        assert rec.risk_reasons, rec.ref.key


def test_demo_has_a_mig_node_plan(demo: tuple[Plan, Snapshot]) -> None:
    plan = demo[0]
    assert plan.mig_nodes and plan.mig_parted_config
    assert any(n.reconfigured_gpus for n in plan.mig_nodes)


def test_fixture_has_a_mig_node_plan_with_a_pseudo_node() -> None:
    names = [n.node for n in pf.plan().mig_nodes]
    assert any(n.startswith("<") for n in names) and any(not n.startswith("<") for n in names)


A100 = Allocation(Sharing.MIG, share=MigShare("3g.40gb", 1), gpu_model="A100-80GB", device_memory_mib=40_192)
PROFILE = load_catalogue().get("A100-80GB").profile("3g.40gb")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("upper_mib", "waiting", "conf", "verified", "level", "says"),
    [
        (36_800, 0.0, 0.86, True, "low", ["36,800 MiB fits the 40,192 MiB one replica sees on MIG 3g.40gb",
                                          "confidence 86%"]),
        (40_193, 0.0, 0.86, True, "high", ["40,193 MiB exceeds the 40,192 MiB"]),  # 1 MiB over the slice
        (36_800, 2.0, 0.86, True, "high", ["requests waiting p95 2"]),
        (36_800, 0.0, 0.49, True, "medium", ["confidence 49% is below 50%"]),
        (36_800, 0.0, 0.86, False, "medium", ["3g.40gb's usable memory is estimated from its name"]),
        (40_193, 0.0, 0.49, False, "high", ["exceeds", "below 50%", "estimated from its name"]),  # every finding
    ],
)
def test_assess_risk(upper_mib: float, waiting: float, conf: float, verified: bool, level: str,
                     says: list[str]) -> None:
    prof = replace(PROFILE, usable_verified=verified)
    got, why = assess_risk(Bound(20_000, 30_000, upper_mib), A100, 40_192, waiting, conf, prof)
    assert got == level
    assert all(any(s in w for w in why) for s in says), why


# -- parsers: each format read back by its stable labels -------------------------------------------

_DEVICE = re.compile(r"^(\d+)[×x](\S+)$")
_GPUS = re.compile(r"^GPUs? (\d+)(?:[–-](\d+))?: (.*)$")


def devices(text: str) -> dict[str, int]:
    """``1×4g.40gb + 1×2g.20gb`` → {profile: count}; ``MIG disabled`` → {}."""
    text = text.strip()
    if text == "MIG disabled":
        return {}
    out = {}
    for part in text.split(" + "):
        m = _DEVICE.match(part.strip())
        assert m, f"not a MIG device: {part!r} in {text!r}"
        out[m.group(2)] = int(m.group(1))
    return out


def gpu_range(first: str, last: str | None) -> range:
    """``3`` or ``3–7`` (en dash, or ``-`` in ASCII output) → the GPU indices."""
    return range(int(first), int(last or first) + 1)


def expand(rows: list[tuple[str, str]]) -> list[dict[str, int]]:
    """(GPU indices, devices) rows → one layout per GPU, checking that the indices run 0, 1, 2, ..."""
    out: list[dict[str, int]] = []
    for indices, text in rows:
        first, _, last = indices.replace("–", "-").partition("-")
        for i in gpu_range(first, last or None):
            assert i == len(out), f"GPU {i} out of order in {rows}"
            out.append(devices(text))
    return out


def normal(layouts: Layouts) -> dict[str, list[dict[str, int]]]:
    return {node: [dict(sorted(d.items())) for d in per_gpu] for node, per_gpu in layouts.items()}


def plan_layouts(nodes: tuple[NodeMigPlan, ...]) -> Layouts:
    return {n.node: [dict(d) for d in n.layouts] for n in nodes}


def _cells(line: str, starts: list[int]) -> list[str]:
    ends = [*starts[1:], len(line) + 1]
    return [line[a:b].strip() for a, b in zip(starts, ends, strict=True)]


def _table_rows(lines: list[str], header_at: int, names: tuple[str, ...]) -> Iterator[list[list[str]]]:
    """The rows of one rich table whose header line is ``lines[header_at]``: each a list of its lines' cells.
    Columns are sliced at their header's position (every column parsed is left-justified)."""
    header = lines[header_at]
    starts = [header.index(n) for n in names]
    row: list[list[str]] = []
    for line in lines[header_at + 2:]:
        if not line.strip():
            break
        cells = _cells(line, starts)
        if cells[0] and row:
            yield row
            row = []
        row.append(cells)
    if row:
        yield row


def parse_table(text: str) -> tuple[dict[str, str], Layouts]:
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if "kind/name" in line and "risk" in line)
    risks = {}
    for row in _table_rows(lines, head, ("namespace", "kind/name", "current", "risk")):
        risks[f"{row[0][0]}/{row[0][1]}"] = row[0][3]
    layouts: Layouts = {}
    at = [i for i, line in enumerate(lines) if "MIG devices per GPU" in line]
    names = ("node", "GPU model", "MIG devices per GPU", "nvidia.com/mig.config")
    for row in _table_rows(lines, at[0], names) if at else []:
        gpu_lines: list[str] = []
        for cells in row:  # a long layout may wrap: a line not starting "GPU" continues the one before
            if cells[2].startswith("GPU") or not gpu_lines:
                gpu_lines.append(cells[2])
            elif cells[2]:
                gpu_lines[-1] += " " + cells[2]
        node = "".join(c[0] for c in row)  # a long pseudo-node name folds over several lines
        layouts[node] = expand([gpu_row(g) for g in gpu_lines])
    return risks, layouts


def gpu_row(line: str) -> tuple[str, str]:
    """``GPUs 3–7: MIG disabled`` → (``3-7``, ``MIG disabled``)."""
    m = _GPUS.match(line)
    assert m, f"not a GPU line: {line!r}"
    return m.group(1) + (f"-{m.group(2)}" if m.group(2) else ""), m.group(3)


def parse_markdown(text: str) -> tuple[dict[str, str], Layouts]:
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| namespace |"))
    names = [c.strip() for c in lines[head].strip("|").split(" | ")]
    risks = {}
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        row = dict(zip(names, cells, strict=True))
        risks[unescape_md(f"{row['namespace']}/{row['kind/name']}")] = row["risk"]
    layouts: Layouts = {}
    node = None
    rows: list[tuple[str, str]] = []
    for line in lines[lines.index("## MIG plan per node"):] if "## MIG plan per node" in lines else []:
        if line.startswith("### Node "):
            node = unescape_md(line.removeprefix("### Node "))
            rows = []
        elif node and re.match(r"^\| \d", line):
            gpus, devs = (c.strip() for c in line.strip("|").split("|"))
            rows.append((gpus, devs))
            layouts[node] = expand(rows)
    return risks, layouts


def unescape_md(text: str) -> str:
    text = re.sub(r"\\(.)", r"\1", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


class _Html(HTMLParser):
    """Risk per workload row (``tr[data-workload]`` → ``td.risk .level``), GPU rows per MIG node
    (``article[data-node]`` → ``tr[data-gpus]`` cells)."""

    def __init__(self) -> None:
        super().__init__()
        self.risks: dict[str, str] = {}
        self.layouts: Layouts = {}
        self._workload: str | None = None
        self._node: str | None = None
        self._rows: dict[str, list[tuple[str, str]]] = {}
        self._gpus: str | None = None
        self._cells: list[str] = []
        self._grab: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "tr" and a.get("data-workload"):
            self._workload = a["data-workload"]
        elif tag == "article" and a.get("data-node") is not None:
            self._node = a["data-node"]
            self._rows[self._node or ""] = []
        elif tag == "tr" and a.get("data-gpus") is not None and self._node is not None:
            self._gpus, self._cells = a["data-gpus"], []
        elif tag == "td" and self._gpus is not None:
            self._cells.append("")
            self._grab = "cell"
        elif tag == "span" and "level" in classes and self._workload:
            self._grab = "risk"

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._gpus is not None and self._node is not None:
            self._rows[self._node].append((self._gpus, self._cells[-1]))
            self._gpus = None
        elif tag == "tr":
            self._workload = None
        elif tag == "article" and self._node is not None:
            self.layouts[self._node] = expand(self._rows[self._node])
            self._node = None
        if tag in ("td", "span"):
            self._grab = None

    def handle_data(self, data: str) -> None:
        if self._grab == "risk" and self._workload:
            self.risks[self._workload] = self.risks.get(self._workload, "") + data.strip()
        elif self._grab == "cell":
            self._cells[-1] += data


def parse_html(text: str) -> tuple[dict[str, str], Layouts]:
    p = _Html()
    p.feed(text)
    return p.risks, p.layouts


def parse_csv(text: str, nodes_csv: str | None) -> tuple[dict[str, str], Layouts]:
    risks = {f"{r['namespace']}/{r['kind']}/{r['name']}": r["risk"] for r in csv.DictReader(io.StringIO(text))}
    layouts: Layouts = {}
    for r in csv.DictReader(io.StringIO(nodes_csv or "")):
        per_gpu = layouts.setdefault(r["node"], [])
        assert int(r["gpu"]) == len(per_gpu)
        assert r["mig_enabled"] == ("true" if r["mig_devices"] else "false")
        per_gpu.append({k: int(v) for k, v in (p.split(":") for p in r["mig_devices"].split(";") if p)})
    return risks, layouts


def parse_json(text: str) -> tuple[dict[str, str], Layouts]:
    doc = json.loads(text)
    risks = {f"{w['namespace']}/{w['kind']}/{w['name']}": w["risk"] for w in doc["workloads"]}
    return risks, {n["node"]: n["layouts"] for n in doc["mig_nodes"]}


def parsed(fmt: str, plan: Plan, snap: Snapshot) -> tuple[dict[str, str], Layouts]:
    if fmt == "table":
        return parse_table(render_table(plan, snap, width=200))
    text = get_formatter(fmt)(plan, snap)
    if fmt == "csv":
        return parse_csv(text, mig_files(plan).get(".mig-nodes.csv"))
    return {"markdown": parse_markdown, "html": parse_html, "json": parse_json}[fmt](text)


FORMATS = ("table", "markdown", "html", "csv", "json")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_agrees_on_risk_and_mig_layout(fmt: str, case: tuple[Plan, Snapshot]) -> None:
    plan, snap = case
    risks, layouts = parsed(fmt, plan, snap)
    assert risks == {r.ref.key: r.risk for r in plan.recommendations}
    assert normal(layouts) == normal(plan_layouts(plan.mig_nodes))


# -- the reason is shown, not only the level --------------------------------------------------------

def _reasons(plan: Plan) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(r.ref.key, r.risk, r.risk_reasons) for r in plan.recommendations if r.risk_reasons]


def test_table_lists_the_reason_of_every_medium_or_high_risk(case: tuple[Plan, Snapshot]) -> None:
    plan, snap = case
    text = " ".join(render_table(plan, snap, width=400).split())
    for key, risk, why in _reasons(plan):
        if risk != "low":
            assert f"{key} {risk}: {'; '.join(why)}" in text


@pytest.mark.parametrize("fmt", ["markdown", "html", "csv", "json"])
def test_every_other_format_carries_every_risk_reason(fmt: str, case: tuple[Plan, Snapshot]) -> None:
    plan, snap = case
    text = get_formatter(fmt)(plan, snap)
    if fmt == "json":
        doc = {f"{w['namespace']}/{w['kind']}/{w['name']}": w for w in json.loads(text)["workloads"]}
        for key, _, why in _reasons(plan):
            assert doc[key]["risk_reasons"] == list(why)
        return
    if fmt == "csv":
        rows = {f"{r['namespace']}/{r['kind']}/{r['name']}": r for r in csv.DictReader(io.StringIO(text))}
        for key, _, why in _reasons(plan):
            assert rows[key]["risk_reasons"] == "; ".join(why)
        return
    flat = unescape_md(" ".join(text.split())) if fmt == "markdown" else " ".join(text.split())
    for _, _, why in _reasons(plan):
        for reason in why:
            shown = reason if fmt == "markdown" else reason.replace("&", "&amp;").replace("<", "&lt;").replace(
                ">", "&gt;")
            assert shown in flat


def test_demo_table_shows_translate_risk_and_its_reason(demo: tuple[Plan, Snapshot]) -> None:
    plan, snap = demo
    rec = next(r for r in plan.recommendations if r.ref.key == TRANSLATE)
    text = render_table(plan, snap, width=160)
    risks, _ = parse_table(text)
    assert risks[TRANSLATE] == "high"
    assert rec.risk_reasons[0] in " ".join(text.split())


# -- the MIG plan's labels and config, in each human format ----------------------------------------

def test_markdown_has_the_label_and_the_mig_parted_config(case: tuple[Plan, Snapshot]) -> None:
    plan, snap = case
    text = get_formatter("markdown")(plan, snap)
    for n in plan.mig_nodes:
        assert f"`nvidia.com/mig.config={n.config_name}`" in text
    block = re.search(r"```yaml\n(.*?)\n```", text, re.S)
    assert block and yaml.safe_load(block.group(1)) == json.loads(json.dumps(plan.mig_parted_config))


def test_html_has_the_label_and_the_mig_parted_config(case: tuple[Plan, Snapshot]) -> None:
    plan, snap = case
    text = get_formatter("html")(plan, snap)
    for n in plan.mig_nodes:
        assert f"<code>nvidia.com/mig.config={n.config_name}</code>" in text
    block = re.search(r'<pre class="config"><code>(.*?)</code></pre>', text, re.S)
    assert block and yaml.safe_load(unescape(block.group(1))) == json.loads(json.dumps(plan.mig_parted_config))


def test_table_names_the_label_per_node(case: tuple[Plan, Snapshot]) -> None:
    plan, snap = case
    text = render_table(plan, snap, width=200)
    assert "nvidia.com/mig.config" in text
    for n in plan.mig_nodes:
        assert n.config_name in text


def test_narrow_table_keeps_risk_and_the_mig_plan_in_ascii(case: tuple[Plan, Snapshot]) -> None:
    plan, snap = case
    text = render_table(plan, snap, width=80)
    assert all(ord(c) < 128 for c in text.replace(pf.NASTY, "")), "narrow output is ASCII"
    assert max(len(line) for line in text.splitlines()) <= 80
    for r in plan.recommendations:
        assert r.risk in text
    for n in plan.mig_nodes:
        assert n.config_name in text.replace("\n", "")


def test_a_plan_without_mig_nodes_has_no_mig_section(case: tuple[Plan, Snapshot]) -> None:
    plan, snap = case
    bare = replace(plan, mig_nodes=(), mig_parted_config={}, device_plugin=None)
    assert "MIG plan per node" not in render_table(bare, snap)
    assert "MIG plan per node" not in get_formatter("markdown")(bare, snap)
    assert "MIG plan per node" not in get_formatter("html")(bare, snap)
    assert mig_files(bare) == {}


# -- CSV: the MIG plan in files beside it, the CSV itself one table ---------------------------------

def test_csv_companions_are_a_csv_and_the_mig_parted_yaml(case: tuple[Plan, Snapshot]) -> None:
    plan, _ = case
    files = mig_files(plan)
    shared = {".device-plugin.yaml"} if plan.device_plugin is not None and plan.device_plugin.configs else set()
    assert set(files) == {".mig-nodes.csv", ".mig-parted.yaml", *shared}
    assert yaml.safe_load(files[".mig-parted.yaml"]) == json.loads(json.dumps(plan.mig_parted_config))
    rows = list(csv.DictReader(io.StringIO(files[".mig-nodes.csv"])))
    assert len(rows) == sum(len(n.layouts) for n in plan.mig_nodes)
    labels = {r["node"]: r["label"] for r in rows}
    assert labels == {n.node: f"nvidia.com/mig.config={n.config_name}" for n in plan.mig_nodes}


def test_cli_writes_the_mig_plan_beside_the_csv(tmp_path: Path) -> None:
    out = tmp_path / "report.csv"
    run = CliRunner().invoke(main, ["report", "--demo", "--no-forecast", "-o", "csv", "--output-file", str(out)])
    assert run.exit_code == 0, run.output
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert rows and all(r["namespace"] for r in rows)  # still one table of workloads
    nodes = list(csv.DictReader((tmp_path / "report.mig-nodes.csv").open(encoding="utf-8")))
    config: Any = yaml.safe_load((tmp_path / "report.mig-parted.yaml").read_text(encoding="utf-8"))
    assert nodes and config["version"] == "v1"
    assert {r["label"].split("=", 1)[1] for r in nodes} >= set(config["mig-configs"])
    assert "report.mig-nodes.csv" in run.output and "report.mig-parted.yaml" in run.output


def test_cli_csv_on_stdout_says_where_the_mig_plan_is() -> None:
    run = CliRunner().invoke(main, ["report", "--demo", "--no-forecast", "-o", "csv"])
    assert run.exit_code == 0, run.output
    assert "--output-file FILE" in run.output  # stderr is mixed in: the note says how to get the MIG plan files
    assert next(iter(csv.DictReader(io.StringIO(run.stdout))))["namespace"]
