"""Every report format names the autoscaler that owns a workload's replicas, beside the replica advice, and
says nothing where none does (the golden files hold that half)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace

import pytest
from jsonschema import Draft202012Validator

from recommender.core.plan import Plan
from recommender.core.usage import Snapshot
from recommender.outputs import get_formatter
from recommender.outputs.table import render_table
from tests.test_outputs_formats import SCHEMA, strict

OWNER = "HorizontalPodAutoscaler/llama-3-8b-chat"
SHOWN = "replicas: HPA/llama-3-8b-chat"  # the human formats' short name


def owned_by(plan: Plan, owner: str | None) -> Plan:
    """The golden plan with ``owner`` on its first workload (the one with a scaling plan)."""
    first, *rest = plan.recommendations
    first = replace(first, workload=replace(first.workload, autoscaler=owner))
    return replace(plan, recommendations=(first, *rest))


def test_json_and_csv_carry_it_per_workload(plan: Plan, snap: Snapshot) -> None:
    doc = json.loads(get_formatter("json")(owned_by(plan, OWNER), snap))
    Draft202012Validator(strict(SCHEMA)).validate(doc)
    assert [w["autoscaler"] for w in doc["workloads"]] == [OWNER] + [None] * (len(doc["workloads"]) - 1)
    rows = list(csv.DictReader(io.StringIO(get_formatter("csv")(owned_by(plan, OWNER), snap))))
    assert [r["autoscaler"] for r in rows] == [OWNER] + [""] * (len(rows) - 1)


@pytest.mark.parametrize(("fmt", "times"), [("markdown", 1), ("html", 2)])  # html: the table and the section
def test_markdown_and_html_show_it_beside_the_recommendation(plan: Plan, snap: Snapshot, fmt: str,
                                                             times: int) -> None:
    assert get_formatter(fmt)(owned_by(plan, OWNER), snap).count(SHOWN) == times
    assert "replicas: " not in get_formatter(fmt)(owned_by(plan, None), snap)


def test_the_table_shows_it_in_the_recommended_cell(plan: Plan, snap: Snapshot) -> None:
    wide = render_table(owned_by(plan, OWNER), snap, width=160)
    assert any(line.rstrip().endswith(SHOWN) or f" {SHOWN} " in line for line in wide.splitlines())
    narrow = render_table(owned_by(plan, "ScaledObject/llama-so"), snap, width=80)
    rows = [line.split("|") for line in narrow.splitlines() if line.startswith("|")]
    cells = "".join(r[3].strip() for r in rows if len(r) > 4)  # the recommended column, wrapped cells joined
    assert "replicas:ScaledObject/llama-so" in cells.replace(" ", "")
