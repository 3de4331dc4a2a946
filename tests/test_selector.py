"""``report -l``: kubectl's label-selector syntax over the workloads' labels (issue 39)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from collectors.files import read_snapshot
from recommender.cli.main import main
from recommender.cli.selector import parse_selector, select_labels
from recommender.core.errors import ConfigError
from recommender.demo import demo_path

LABELS = {"app": "chat", "tier": "web", "env": "prod"}


@pytest.mark.parametrize(("text", "matches"), [
    ("app=chat", True), ("app==chat", True), ("app=other", False),
    ("app=chat,tier!=web", False), ("app=chat,tier!=db", True), ("missing!=x", True),
    ("env in (prod, staging)", True), ("env in (dev)", False), ("env notin (prod)", False),
    ("missing notin (a,b)", True), ("missing in (a,b)", False),
    ("app", True), ("!app", False), ("!missing", True), ("app=chat, env in (prod,dev), !spot", True),
    ("app=chat,app=other", False), ("example.com/team=x", False),
])
def test_selector_matches_as_kubectl_does(text: str, matches: bool) -> None:
    assert parse_selector(text).matches(LABELS) is matches


@pytest.mark.parametrize("bad", ["", " ", "app=chat,", ",app=chat", "app=chat,,tier=web", "bad key=x",
                                 "k in (a,b", "k in (a b)", "k=v w", "k=@", "k>1", "x" * 5000])
def test_a_malformed_selector_is_one_line(bad: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_selector(bad)
    assert "\n" not in str(exc.value) and str(exc.value).startswith("-l ")


def test_select_keeps_matching_workloads_and_their_usage() -> None:
    snap = read_snapshot(demo_path())
    kept = select_labels(snap, parse_selector("team=chat"))
    assert kept.workloads and [w for w in snap.workloads if w.labels.get("team") == "chat"] == list(kept.workloads)
    keys = {w.ref.key for w in kept.workloads}
    assert all(set(f.columns) <= keys for f in kept.usage.values())


def test_report_l_reports_only_what_matches() -> None:
    snap = read_snapshot(demo_path())
    want = sorted(w.ref.name for w in snap.workloads if w.labels.get("team") in ("search", "research"))
    args = ["report", "--demo", "--no-forecast", "-o", "json", "-l", "team in (search, research)"]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    assert sorted(w["name"] for w in json.loads(run.stdout)["workloads"]) == want


@pytest.mark.parametrize(("selector", "says"), [("team in (a", "-l 'team in (a'"), ("team=nobody", "-l matches")])
def test_report_l_errors_are_one_line(selector: str, says: str) -> None:
    run = CliRunner().invoke(main, ["report", "--demo", "--no-forecast", "-l", selector])
    assert run.exit_code == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0]
