"""The JSON document and ``schema.json`` come from one typed model (issue 39: the schema was written by hand
beside the code that emits the document, and JSON.md and the schema disagreed on the version)."""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator, ValidationError
from pydantic import ValidationError as ModelError

from recommender.cli.main import main
from recommender.core.plan import Plan
from recommender.outputs import get_formatter
from recommender.outputs.docmodel import Report, schema_text
from recommender.outputs.jsondoc import SCHEMA_VERSION, document

OUTPUTS = Path(__file__).parents[1] / "recommender" / "outputs"


def test_committed_schema_is_the_generated_one() -> None:
    """Edit docmodel.py, then ``python -m recommender.outputs.docmodel > recommender/outputs/schema.json``."""
    assert (OUTPUTS / "schema.json").read_text(encoding="utf-8") == schema_text()


def test_json_md_names_only_the_version_the_code_writes() -> None:
    """JSON.md said 1.5 in its title and 1.6 in its table while the code wrote a third."""
    text = (OUTPUTS / "JSON.md").read_text(encoding="utf-8")
    named = re.findall(r'schema version ([0-9.]+)\)|`"([0-9.]+)"`|"schema_version": "([0-9.]+)"', text)
    versions = {v for groups in named for v in groups if v}
    assert len(named) >= 3 and versions == {SCHEMA_VERSION}


@pytest.fixture(scope="module")
def demo_doc() -> dict[str, Any]:
    run = CliRunner().invoke(main, ["report", "--demo", "-o", "json"])
    assert run.exit_code == 0, run.output
    doc: dict[str, Any] = json.loads(run.stdout)
    return doc


def _docs(plan: Plan, demo: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(get_formatter("json")(plan, None)), demo]


def test_model_and_schema_accept_the_documents_written(plan: Plan, demo_doc: dict[str, Any]) -> None:
    schema = json.loads(schema_text())
    for doc in _docs(plan, demo_doc):
        assert Report.model_validate(doc).model_dump(mode="json", by_alias=True) == doc  # round trip, same order
        Draft202012Validator(schema).validate(doc)
    assert any(w["scaling"] and w["forecasts"] and w["class"] for w in demo_doc["workloads"])  # every part seen


@pytest.mark.parametrize(("path", "bad"), [
    (("workloads", 0, "risk"), "extreme"),
    (("workloads", 0, "current", "sharing"), "sli"),
    (("workloads", 0, "confidence"), 1.5),
    (("generated_at",), "2026-11-01 00:00"),
    (("schema_version",), "3.0"),
    (("summary", "workloads"), -1),
])
def test_model_and_schema_reject_the_same_bad_values(plan: Plan, path: tuple[str | int, ...], bad: Any) -> None:
    doc = copy.deepcopy(document(plan))
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    with pytest.raises(ModelError):
        Report.model_validate(doc)
    with pytest.raises(ValidationError):
        Draft202012Validator(json.loads(schema_text())).validate(doc)


def test_code_cannot_emit_an_undocumented_key_but_readers_accept_one(plan: Plan) -> None:
    """The writer is strict (a field added in code must be added to the model, so to the schema); the
    published schema stays open, so a reader of 2.0 accepts a 2.1 document with a new field."""
    doc = copy.deepcopy(document(plan))
    doc["workloads"][0]["new_field"] = 1
    with pytest.raises(ModelError, match="new_field"):
        Report.model_validate(doc)
    Draft202012Validator(json.loads(schema_text())).validate(doc)
    del doc["workloads"][0]["risk"]
    with pytest.raises(ValidationError):
        Draft202012Validator(json.loads(schema_text())).validate(doc)


def test_the_writer_refuses_a_key_the_model_does_not_name(plan: Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    """The document is built through the model: a field added in jsondoc alone fails at once, not in review."""
    from recommender.outputs import jsondoc

    real = jsondoc.summary
    monkeypatch.setattr(jsondoc, "summary", lambda s: {**real(s), "gpus_wasted": 1.0})
    with pytest.raises(ModelError, match="gpus_wasted"):
        jsondoc.document(plan)


ODD_TEXT = "".join(chr(i) for i in range(0x80)) + "\u00e9\u2028\u2029\ud7ff\ue000\U0001f600 \"quoted\" \\ back"


def _with(monkeypatch: pytest.MonkeyPatch, extra: Any, warning: str = ODD_TEXT) -> None:
    """Route extra values through the document: a free-form dict (mig_parted_config) and a warning text."""
    from recommender.outputs import jsondoc

    real = jsondoc._raw

    def raw(plan: Plan) -> dict[str, Any]:
        doc = real(plan)
        return {**doc, "warnings": [*doc["warnings"], warning],
                "mig_parted_config": {"version": "v1", "mig-configs": {}, "extra": extra}}

    monkeypatch.setattr(jsondoc, "_raw", raw)


def test_the_fast_json_is_byte_identical_to_json_dumps(plan: Plan) -> None:
    """pydantic's serializer writes what json.dumps of the validated document writes (indent, key order, UTF-8
    as is, floats, empty containers, the trailing newline), on the fixture plan and the demo."""
    from recommender.outputs.jsondoc import reference_json

    assert get_formatter("json")(plan, None) == reference_json(plan)
    run = CliRunner().invoke(main, ["report", "--demo", "-o", "json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["workloads"]  # the demo plan, rendered by the registered formatter


@pytest.mark.parametrize("extra", [
    [0.1, -0.0, 1 / 3, 123456789.123, 1e16, 1.5e300, 0.0001, float("nan"), float("inf"), [], {}, {"k": [1, None]}],
    # written differently by pydantic (so through the json.dumps fallback): as exponents, and as decimals
    [2.5e-07, -8.1e-06, 1e-10, 0.00012345678],
    [1e-05, -2.5e-05],
    [random.Random(seed).uniform(-1, 1) * 10.0 ** random.Random(seed).randint(-12, 20) for seed in range(500)],
])
def test_odd_values_render_as_json_dumps_renders_them(plan: Plan, monkeypatch: pytest.MonkeyPatch,
                                                      extra: list[Any]) -> None:
    from recommender.outputs.jsondoc import reference_json

    _with(monkeypatch, extra)
    assert get_formatter("json")(plan, None) == reference_json(plan)


def test_nan_in_a_number_field_is_refused(plan: Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    """JSON has no NaN: a typed number field holding one is a validation error, never a silent null."""
    from recommender.outputs import jsondoc

    real = jsondoc.summary
    monkeypatch.setattr(jsondoc, "summary", lambda s: {**real(s), "gpus_held": float("nan")})
    with pytest.raises(ModelError, match="gpus_held"):
        get_formatter("json")(plan, None)


def _points_row_by_row(sampled: Any) -> list[dict[str, Any]]:
    """The forecast points as jsondoc wrote them before s50 (a Timestamp and a record at a time)."""
    import pandas as pd

    from recommender.outputs import text as t
    from recommender.outputs.jsondoc import demand

    return [{"timestamp": t.iso_utc(ts.to_pydatetime()), **{str(c): demand(float(v)) for c, v in row.items()}}
            for ts, row in zip(pd.DatetimeIndex(sampled.index), sampled.to_dict("records"), strict=True)]


@pytest.mark.parametrize("tz", [None, "UTC", "America/New_York", "Asia/Kolkata"])
@pytest.mark.parametrize("unit", ["ns", "s"])
def test_forecast_points_are_written_as_row_by_row_wrote_them(tz: str | None, unit: str) -> None:
    """Forecast points formatted a column at a time give the same dicts as a Timestamp and a record at a time:
    naive (UTC) and zoned indexes across a DST change, times off the second, NaN/inf, float32 and int columns."""
    import numpy as np
    import pandas as pd

    from recommender.outputs.jsondoc import _points

    rng = np.random.default_rng(5)
    index = pd.date_range("2026-03-07 22:00:00", periods=300, freq="997ms" if unit == "ns" else "1h", tz=tz)
    index = index.as_unit(unit) + (pd.Timedelta(milliseconds=999) if unit == "ns" else pd.Timedelta(0))
    frame = pd.DataFrame({"mean": rng.normal(50, 30, 300), "lo_80": rng.normal(-1e-4, 1e-3, 300),
                          "hi_95": rng.lognormal(8, 4, 300).astype(np.float32), 7: rng.integers(-5, 5, 300)},
                         index=index)
    frame.iloc[3, 0], frame.iloc[4, 1], frame.iloc[5, 0] = np.nan, np.inf, -0.0
    for sampled in (frame, frame.iloc[::7], frame.iloc[:0]):
        assert _points(sampled) == _points_row_by_row(sampled)
    assert _points(frame.iloc[:1])[0]["timestamp"].endswith("Z")
