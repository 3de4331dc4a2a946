"""Report formats: golden files, the registry, and the contract every formatter keeps.

Golden files live in tests/golden/. After an intended change to a format, regenerate them with
``UPDATE_GOLDEN=1 python -m pytest tests/test_outputs.py`` and review the diff like code.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from importlib.metadata import EntryPoint
from pathlib import Path

import matplotlib
import pytest

from recommender.core import registry as reg
from recommender.core.errors import ConfigError
from recommender.core.plan import Plan, Summary
from recommender.core.usage import Snapshot
from recommender.outputs import (
    ENTRY_POINT_GROUP,
    PLAN_ONLY,
    DuplicateFormatterError,
    formatter_names,
    get_formatter,
    register_formatter,
    unregister_formatter,
)
from recommender.outputs.table import render_table
from tests import planfixture as pf

GOLDEN = Path(__file__).parent / "golden"
BUILTIN = ["csv", "html", "json", "markdown", "table", "wide", "yaml"]


def check_golden(name: str, actual: str) -> None:
    """Compare with tests/golden/<name> byte for byte; rewrite it instead when UPDATE_GOLDEN=1."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(actual)
        return
    if not path.exists():
        pytest.fail(f"{path} is missing: run UPDATE_GOLDEN=1 python -m pytest tests/test_outputs.py")
    with open(path, encoding="utf-8", newline="") as f:
        expected = f.read()
    if actual != expected:
        diff = "".join(list(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                                 f"golden/{name}", "rendered", n=1))[:80])
        pytest.fail(f"{name} differs from the golden file (matplotlib {matplotlib.__version__}); if the change "
                    f"is intended, rerun with UPDATE_GOLDEN=1 and review the diff:\n{diff}")


@pytest.mark.parametrize(("fmt", "golden"), [("json", "report.json"), ("csv", "report.csv"),
                                             ("markdown", "report.md"), ("html", "report.html")])
def test_golden(fmt: str, golden: str, plan: Plan, snap: Snapshot) -> None:
    check_golden(golden, get_formatter(fmt)(plan, snap))


def test_golden_table(plan: Plan, snap: Snapshot) -> None:
    # the registered "table" follows the terminal's width; the golden file pins 160 columns
    check_golden("report.txt", render_table(plan, snap, width=160))


@pytest.mark.parametrize("fmt", BUILTIN)
def test_rendering_is_deterministic(fmt: str, plan: Plan, snap: Snapshot) -> None:
    assert get_formatter(fmt)(plan, snap) == get_formatter(fmt)(pf.plan(), pf.snapshot())


# -- the contract every formatter keeps (built-in or plugin) -----------------------------------------

def empty_plan() -> Plan:
    return Plan(pf.END, pf.START, pf.END, pf.STEP_S, (), Summary(0, 0, 0.0, 0.0, None, 0.0, 0.0, 0.0))


@pytest.mark.parametrize("fmt", BUILTIN)
@pytest.mark.parametrize("case", ["with snapshot", "without snapshot", "empty plan"])
def test_formatter_contract(fmt: str, case: str, plan: Plan, snap: Snapshot) -> None:
    """Text out, ending in a newline, with no NaN, for a full plan, no snapshot, and no workloads."""
    args = {"with snapshot": (plan, snap), "without snapshot": (plan, None), "empty plan": (empty_plan(), None)}
    out = get_formatter(fmt)(*args[case])
    assert isinstance(out, str) and out.endswith("\n")
    assert not re.search(r"\bnan\b", out, re.IGNORECASE)
    if case != "empty plan":
        assert "llama-3-8b-chat" in out


# -- registry -------------------------------------------------------------------------------------

def test_builtin_names() -> None:
    assert set(BUILTIN) <= set(formatter_names())


@pytest.mark.parametrize("name", BUILTIN)
def test_duplicate_registration_is_rejected(name: str) -> None:
    # rejected whether or not the built-in's module has been imported yet
    with pytest.raises(DuplicateFormatterError, match=f"'{name}' is already registered"):
        register_formatter(name)(lambda plan, snapshot: "")
    get_formatter(name)
    with pytest.raises(DuplicateFormatterError, match=f"'{name}' is already registered"):
        register_formatter(name)(lambda plan, snapshot: "")


def test_lookup_imports_only_the_format_asked_for() -> None:
    """``json`` must not pay for matplotlib (about half a second of every CLI run)."""
    code = ("import sys; from recommender.outputs import get_formatter, formatter_names; formatter_names(); "
            "get_formatter('json'); get_formatter('table'); assert 'matplotlib' not in sys.modules, 'imported'")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         cwd=Path(__file__).parents[1])
    assert run.returncode == 0, run.stderr


def test_registering_the_same_function_again_is_a_no_op() -> None:
    fn = get_formatter("csv")
    assert register_formatter("csv")(fn) is fn
    assert get_formatter("csv") is fn


def test_unknown_format_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown report format 'pdf'; valid formats: csv, html, json, markdown, "
                                          r"table"):
        get_formatter("pdf")


@pytest.mark.parametrize("bad", ["", " table", "table "])
def test_bad_names_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="must be non-empty"):
        register_formatter(bad)


def test_register_and_use_a_formatter(plan: Plan) -> None:
    @register_formatter("count")
    def count(p: Plan, s: Snapshot | None) -> str:
        return f"{len(p.recommendations)}\n"

    try:
        assert get_formatter("count")(plan, None) == "5\n"
        assert "count" in formatter_names()
    finally:
        unregister_formatter("count")
    assert "count" not in formatter_names()


def shout(plan: Plan, snapshot: Snapshot | None) -> str:
    """A plugin formatter, found through a (fake) entry point."""
    return "SHOUT\n"


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[EntryPoint]]:
    """Installed entry points, faked: the registry reads them through ``entry_points(group=...)``."""
    installed: list[EntryPoint] = []

    def fake_entry_points(group: str) -> list[EntryPoint]:
        return [ep for ep in installed if ep.group == group]

    monkeypatch.setattr(reg, "entry_points", fake_entry_points)
    yield installed
    for ep in installed:
        if ep.name not in BUILTIN:
            unregister_formatter(ep.name)


def test_entry_point_plugins_load_lazily(plugins: list[EntryPoint], plan: Plan) -> None:
    plugins += [EntryPoint("shout", "tests.test_outputs:shout", ENTRY_POINT_GROUP),
                EntryPoint("broken", "no_such_module_xyz:render", ENTRY_POINT_GROUP)]
    assert {"shout", "broken"} <= set(formatter_names())  # listed without importing anything
    assert get_formatter("shout")(plan, None) == "SHOUT\n"
    assert get_formatter("table") is not shout  # a broken plugin does not break the built-ins
    with pytest.raises(ConfigError, match=r"'broken' .* failed to load"):
        get_formatter("broken")


def test_a_plugin_cannot_take_a_builtin_name(plugins: list[EntryPoint]) -> None:
    plugins.append(EntryPoint("table", "tests.test_outputs:shout", ENTRY_POINT_GROUP))
    assert get_formatter("table") is not shout
    assert formatter_names().count("table") == 1


def test_two_plugins_with_one_name_are_an_error(plugins: list[EntryPoint]) -> None:
    plugins += [EntryPoint("twin", "tests.test_outputs:shout", ENTRY_POINT_GROUP),
                EntryPoint("twin", "tests.test_outputs:plan", ENTRY_POINT_GROUP)]
    with pytest.raises(ConfigError, match="provided by several plugins"):
        get_formatter("twin")


def test_a_plugin_that_is_not_callable_is_an_error(plugins: list[EntryPoint]) -> None:
    plugins.append(EntryPoint("golden", "tests.test_outputs:GOLDEN", ENTRY_POINT_GROUP))
    with pytest.raises(ConfigError, match="is not callable"):
        get_formatter("golden")


def test_formatters_take_a_plan_without_a_snapshot(plan: Plan) -> None:
    # without a snapshot the "used" column falls back to the need target or a dash: never a crash
    out = get_formatter("markdown")(replace(plan, warnings=()), None)
    assert "p95 seen" not in out and "## Warnings" not in out


@pytest.mark.parametrize("fmt", sorted(PLAN_ONLY))
def test_a_plan_only_format_renders_the_same_without_the_usage(fmt: str, plan: Plan, snap: Snapshot) -> None:
    # a report in these formats drops the usage frames before rendering (recommender.cli.app.make_reports)
    assert snap.usage
    assert get_formatter(fmt)(plan, replace(snap, usage={})) == get_formatter(fmt)(plan, snap)
