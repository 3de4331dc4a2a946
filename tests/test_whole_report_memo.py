"""A report whose inputs are exactly those of the last one reads its rendered report back from the report memo
beside the cache (``recommender.cli.reportmemo``) instead of running the pipeline: the same bytes as a report
computed without any cache. Any changed input (a series value in the new steps, a workload, a setting, an override
file, the code) computes the report again; a spoilt file is one warning line and a full computation; another
code's key is a silent miss; the file keeps no server address in clear."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from recommender.cli import app, reportmemo
from recommender.core import usage as m
from recommender.core.settings import ForecastSettings, PolicySettings, Settings
from recommender.core.settings_scaling import ScalingSettings
from recommender.core.settings_sources import PrometheusSettings
from recommender.core.usage import Snapshot
from recommender.pipeline import run
from tests.builders import END
from tests.test_report_memo import fleet

URL = "http://prom.example.org:9090"


@pytest.fixture
def source(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """What the Prometheus source hands the report (``snap``; the collection itself is not under test here) and
    how many times the pipeline ran (``runs``)."""
    state: dict[str, Any] = {"snap": fleet(), "runs": Counter()}

    def collected(*_: Any, **__: Any) -> Snapshot:
        return replace(state["snap"], usage=dict(state["snap"].usage))  # a dict of its own: a json report hands
        # it over to the pipeline, which takes out what it no longer reads

    def counted(*a: Any, **kw: Any) -> Any:
        state["runs"]["run"] += 1
        return real(*a, **kw)

    real = run.run_cycle  # what the report runs (run_once is it too)
    monkeypatch.setattr(app, "collect", collected)
    monkeypatch.setattr(run, "run_cycle", counted)
    yield state


def settings(folder: Path | None, **kw: Any) -> Settings:
    where = {"cache_dir": str(folder)} if folder is not None else {"cache": False}
    return Settings(prometheus=PrometheusSettings(url=URL, **where), **kw)


def report(s: Settings, fmts: tuple[str, ...] = ("json",)) -> dict[str, tuple[str, dict[str, str]]]:
    return app.make_reports("prometheus", None, s, END, fmts)


def memo_file(folder: Path) -> Path:
    (found,) = folder.glob("*.report")
    return found


def test_the_same_inputs_read_the_report_back_without_the_pipeline(source: dict[str, Any], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    uncached = report(settings(None))
    first = report(settings(tmp_path))
    assert first == uncached and source["runs"]["run"] == 2
    again = report(settings(tmp_path))
    assert again == uncached and source["runs"]["run"] == 2  # no pipeline
    source["snap"] = fleet()  # the same inputs built again: equal, not the same objects
    assert report(settings(tmp_path)) == uncached and source["runs"]["run"] == 2
    assert "warning" not in capsys.readouterr().err


def _last_step(snap: Snapshot, column: str, by: float | None) -> pd.DataFrame:
    """The request rate with one workload's last step raised ``by`` (None: by one unit in the last place)."""
    rate = snap.usage[m.REQUEST_RATE]
    values = rate.to_numpy().copy()
    j = list(rate.columns).index(column)
    values[-1, j] = np.nextafter(values[-1, j], np.inf) if by is None else values[-1, j] + by
    return pd.DataFrame(values, index=rate.index, columns=rate.columns)


def test_a_changed_value_in_the_new_steps_computes_the_report_again(source: dict[str, Any], tmp_path: Path) -> None:
    report(settings(tmp_path))
    snap: Snapshot = source["snap"]
    source["snap"] = replace(snap, usage={**snap.usage, m.REQUEST_RATE: _last_step(snap, "ml/Deployment/code", 3.0)})
    changed = report(settings(tmp_path))
    assert source["runs"]["run"] == 2
    assert changed == report(settings(None))
    assert report(settings(tmp_path)) == changed and source["runs"]["run"] == 3  # kept in turn


def test_a_changed_workload_computes_the_report_again(source: dict[str, Any], tmp_path: Path) -> None:
    report(settings(tmp_path))
    snap: Snapshot = source["snap"]
    source["snap"] = replace(snap, workloads=tuple(replace(w, kv_capacity_tokens=200_000) if w.ref.name == "embed"
                                                   else w for w in snap.workloads))
    assert report(settings(tmp_path)) == report(settings(None)) and source["runs"]["run"] == 3


@pytest.mark.parametrize("kw", [{"forecast": ForecastSettings(horizon_s=7_200.0)},
                                {"policy": PolicySettings(idle_compute_frac=0.3)}], ids=["horizon", "idle"])
def test_a_changed_setting_computes_the_report_again(source: dict[str, Any], tmp_path: Path,
                                                     kw: dict[str, Any]) -> None:
    report(settings(tmp_path))
    changed = report(settings(tmp_path, **kw))
    assert source["runs"]["run"] == 2 and changed == report(settings(None, **kw))


def test_another_code_version_computes_the_report_again_and_says_nothing(
        source: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    first = report(settings(tmp_path))
    monkeypatch.setattr(reportmemo, "code_version", lambda: "another build")
    assert report(settings(tmp_path)) == first and source["runs"]["run"] == 2
    assert "warning" not in capsys.readouterr().err


def _spoilt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "foreign":
        path.write_bytes(b"PK\x03\x04 not a memo at all")
    elif how == "other-format":
        path.write_bytes(data.replace(b"memo\n1\n", b"memo\n9\n", 1))
    else:  # one byte of the body changed
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 1]) + data[-9:])


@pytest.mark.parametrize("how", ["truncated", "empty", "foreign", "other-format", "altered"])
def test_a_spoilt_report_memo_is_one_warning_and_a_full_computation(
        source: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str) -> None:
    first = report(settings(tmp_path))
    _spoilt(memo_file(tmp_path), how)
    capsys.readouterr()
    assert report(settings(tmp_path)) == first and source["runs"]["run"] == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(lines) == 1 and "report memo file" in lines[0] and "computing the report" in lines[0]
    assert report(settings(tmp_path)) == first and source["runs"]["run"] == 2  # replaced by a whole file
    assert "warning" not in capsys.readouterr().err


def test_formats_kept_under_one_key_add_up(source: dict[str, Any], tmp_path: Path) -> None:
    json_only = report(settings(tmp_path))
    both = report(settings(tmp_path), ("json", "yaml"))  # yaml is not kept yet: computed, json kept beside it
    assert source["runs"]["run"] == 2 and both["json"] == json_only["json"]
    assert report(settings(tmp_path), ("yaml", "json")) == both and source["runs"]["run"] == 2
    assert report(settings(None), ("json", "yaml")) == both


def test_formats_a_terminal_or_charts_shape_are_not_kept(source: dict[str, Any], tmp_path: Path) -> None:
    report(settings(tmp_path), ("table",))
    report(settings(tmp_path), ("table",))
    assert source["runs"]["run"] == 2 and not list(tmp_path.glob("*.report"))


def test_the_file_keeps_no_server_address_in_clear(source: dict[str, Any], tmp_path: Path) -> None:
    first = report(settings(tmp_path), ("json", "csv"))
    assert "prom.example.org:9090" in first["json"][0]  # the KEDA trigger's address: the report says it
    assert b"prom.example.org:9090" not in memo_file(tmp_path).read_bytes()


@pytest.mark.parametrize("text", ["", "prom.example.org:9090", "prom.example.org:9090prom.example.org:9090",
                                  "a http://prom.example.org:9090/x b prom.example.org:9090\nc", "no address",
                                  "\u00e9 prom.example.org:9090 \u00e9"])
def test_texts_come_back_whole_around_the_addresses_taken_out(text: str) -> None:
    hosts = reportmemo._hosts(settings(None))
    assert hosts == ["prom.example.org:9090"]
    data = b"".join(reportmemo.dumps("k", {"json": (text, {".x.csv": text + "!"})}, hosts))
    assert b"prom.example.org:9090" not in data
    framed = reportmemo.framing.frame(reportmemo.MAGIC, reportmemo.FORMAT_VERSION, (data,))
    assert reportmemo.loads(framed, hosts) == ("k", {"json": (text, {".x.csv": text + "!"})})


def test_an_address_is_kept_out_with_and_without_its_credentials() -> None:
    s = Settings(prometheus=PrometheusSettings(url="https://prom.example.org:9090/api"),
                 scaling=ScalingSettings(keda_prometheus_url="http://me:secret@keda-prom:80"))
    assert reportmemo._hosts(s) == ["me:secret@keda-prom:80", "prom.example.org:9090", "keda-prom:80"]


def test_the_key_is_every_input(tmp_path: Path) -> None:
    snap, s = fleet(), settings(tmp_path)
    key = reportmemo.report_key(snap, s, "gpu-rightsize")
    assert key == reportmemo.report_key(fleet(), s, "gpu-rightsize")
    rate = snap.usage[m.REQUEST_RATE]
    rows = pd.DataFrame(np.ascontiguousarray(rate.to_numpy()), index=rate.index, columns=rate.columns, copy=False)
    assert rows.to_numpy().flags.c_contiguous != rate.to_numpy().flags.c_contiguous
    held = {**snap.usage, m.REQUEST_RATE: rows}
    assert reportmemo.report_key(replace(snap, usage=held), s, "gpu-rightsize") == key  # however a frame holds it
    nudged = _last_step(snap, "ml/Deployment/chat", None)
    assert reportmemo.report_key(replace(snap, usage={**snap.usage, m.REQUEST_RATE: nudged}), s, "gpu-rightsize") != key
    later = replace(snap, end=snap.end.replace(second=1))
    assert reportmemo.report_key(later, s, "gpu-rightsize") != key
    assert reportmemo.report_key(snap, s, "another-policy") != key
    catalogue = tmp_path / "gpus.yaml"
    catalogue.write_text("gpus: {}\n")
    with_file = settings(tmp_path, policy=PolicySettings(catalogue_override=str(catalogue)))
    first = reportmemo.report_key(snap, with_file, "gpu-rightsize")
    catalogue.write_text("gpus: {A100: {}}\n")
    assert first not in (key, reportmemo.report_key(snap, with_file, "gpu-rightsize"))
    token = Settings(prometheus=PrometheusSettings(url=URL, cache_dir=str(tmp_path), bearer_token="one"))
    other = Settings(prometheus=PrometheusSettings(url=URL, cache_dir=str(tmp_path), bearer_token="two"))
    assert reportmemo.report_key(snap, token, "gpu-rightsize") == reportmemo.report_key(snap, other, "gpu-rightsize")
    assert reportmemo.report_key(snap, token, "gpu-rightsize") != key  # given or not: the report says which


PROBE = """
import json, sys
from dataclasses import replace
import numpy as np
from recommender.cli import app
from recommender.core import usage as m
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from tests.builders import END, snapshot, whole_gpu, workload

t = np.arange(432, dtype=float)
snap = snapshot([workload(n, whole_gpu()) for n in ("chat", "code")],
                {m.FB_USED_MIB: {"chat": 30_000.0, "code": 50_000.0},
                 m.GR_ENGINE_ACTIVE_FRAC: {"chat": 0.2 + 0.1 * np.sin(t / 20), "code": 0.5}}, days=3)
app.collect = lambda *a, **kw: replace(snap, usage=dict(snap.usage))
s = Settings(prometheus=PrometheusSettings(url="http://prom.example.org:9090", cache_dir=sys.argv[1]))
text = app.make_reports("prometheus", None, s, END, ("json",))["json"][0]
print(json.dumps([text, sorted(sys.modules)]), file=sys.stderr)
"""


def _probe(folder: Path) -> tuple[str, set[str]]:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", PROBE, str(folder)], cwd=root, env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    text, modules = json.loads(run.stderr.strip().splitlines()[-1])
    return text, set(modules)


def test_a_report_read_back_imports_no_pipeline_analysis_or_model_library(tmp_path: Path) -> None:
    """A fresh process whose report is read back never imports what computing it needs (each a share of a warm
    report's time)."""
    first, computed = _probe(tmp_path)
    again, read_back = _probe(tmp_path)
    assert again == first
    heavy = {"recommender.pipeline.run", "recommender.analysis.features", "policies.replicas",
             "recommender.outputs.jsondoc"}
    assert heavy <= computed  # the probe sees them where the report is computed
    assert not {name for name in read_back if name.split(".")[0] in ("scipy", "sklearn", "statsmodels")}
    assert not {name for name in read_back if name.startswith(("recommender.pipeline", "recommender.analysis",
                                                              "policies", "recommender.outputs.jsondoc"))}


def test_a_wide_frame_is_digested_a_few_columns_at_a_time_to_the_same_key(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = fleet()
    rate = snap.usage[m.REQUEST_RATE]
    wide = pd.concat([rate.add_suffix(f"-{k}") for k in range(700 // rate.shape[1] + 1)], axis=1)
    mixed = wide.astype({c: "float32" for c in wide.columns[::3]})  # two blocks: pandas copies to read them
    for frame in (wide, mixed):
        held = replace(snap, usage={**snap.usage, m.REQUEST_RATE: frame})
        chunked = reportmemo.snapshot_digest(held)
        with monkeypatch.context() as patch:
            patch.setattr(reportmemo, "DIGEST_COLUMNS", frame.shape[1] + 1)  # the whole frame at once
            assert reportmemo.snapshot_digest(held) == chunked
        last = frame.copy()
        last.iloc[-1, 600] += 1.0  # a column in a later piece
        assert reportmemo.snapshot_digest(replace(snap, usage={**snap.usage, m.REQUEST_RATE: last})) != chunked
