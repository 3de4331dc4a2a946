"""kubectl's ``-o yaml`` and ``-o wide``: the JSON document as YAML, the table at the width it needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from recommender.core.plan import Plan
from recommender.core.usage import Snapshot
from recommender.outputs import get_formatter
from recommender.outputs.table import NARROW_WIDTH, full_width, render_table

SCHEMA = json.loads((Path(__file__).parents[1] / "recommender" / "outputs" / "schema.json").read_text("utf-8"))


def test_yaml_is_the_json_document(plan: Plan, snap: Snapshot) -> None:
    doc = yaml.safe_load(get_formatter("yaml")(plan, snap))
    assert doc == json.loads(get_formatter("json")(plan, snap))
    Draft202012Validator(SCHEMA).validate(doc)


def test_yaml_keeps_timestamps_and_versions_as_strings(plan: Plan) -> None:
    """Unquoted, ``2026-11-01T00:00:00Z`` and ``2.0`` would load as a datetime and a float."""
    doc = yaml.safe_load(get_formatter("yaml")(plan, None))
    assert isinstance(doc["generated_at"], str) and isinstance(doc["schema_version"], str)


@pytest.mark.parametrize("columns", ["60", "120", "400"])
def test_wide_ignores_the_terminal(columns: str, plan: Plan, snap: Snapshot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    out = get_formatter("wide")(plan, snap)
    assert out == render_table(plan, snap, width=full_width(plan, snap))
    assert max(len(line) for line in out.splitlines()) <= full_width(plan, snap)
    assert "held→needed" in out  # the wide layout, never the narrow ASCII one


def test_wide_is_at_least_as_wide_as_the_widest_name(plan: Plan, snap: Snapshot) -> None:
    longest = max(len(r.ref.name) for r in plan.recommendations)
    assert full_width(plan, snap) >= max(NARROW_WIDTH, longest)
