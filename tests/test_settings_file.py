"""``--settings FILE`` (and the controller ConfigMap's settings sections): the settings the pipeline reads
beyond the flags, a misspelt key an error of one line, a flag given winning over the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from recommender.cli.main import main
from recommender.cli.options import build_settings


def report(tmp_path: Path, text: str | None, *extra: str) -> Any:
    args = ["report", "--demo", "-o", "json", *extra]
    if text is not None:
        path = tmp_path / "settings.yaml"
        path.write_text(text, encoding="utf-8")
        args += ["--settings", str(path)]
    return CliRunner().invoke(main, args)


def doc(result: Any) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_the_settings_file_reaches_the_prices_and_the_mechanisms(tmp_path: Path) -> None:
    cheap = doc(report(tmp_path, "prices:\n  usd_per_gpu_hour: {default: 1.0}\n"))["summary"]
    dear = doc(report(tmp_path, "prices:\n  usd_per_gpu_hour: {default: 3.0}\n"))["summary"]
    assert cheap["monthly_savings_usd"] > 0
    assert dear["monthly_savings_usd"] == pytest.approx(3 * cheap["monthly_savings_usd"], rel=1e-3)
    mig = [w for w in doc(report(tmp_path, None))["workloads"] if (w["recommended"] or {}).get("sharing") == "mig"]
    assert mig  # the demo recommends MIG slices by default...
    narrowed = doc(report(tmp_path, "mechanisms:\n  allowed: [exclusive, mps]\n"))["workloads"]
    assert not [w for w in narrowed if (w["recommended"] or {}).get("sharing") == "mig"]  # ...and none when not allowed


@pytest.mark.parametrize(("text", "line"), [
    ("scaling:\n  ttft_objective: 1.0\n", "error: invalid setting scaling.ttft_objective: Extra inputs are not "
                                          "permitted"),
    ("scalng:\n  ttft_objective_s: 1.0\n", "error: --settings "),
    ("prices:\n  usd_per_gpu_hour: {H100-80GB: 4.0}\n", "needs a 'default' price"),
    ("scaling:\n  ttft_objective_s: -1\n", "error: invalid setting scaling.ttft_objective_s: "),
    # under vLLM's first TTFT bucket: every request would count as over it, and the replicas be the most allowed
    ("scaling:\n  ttft_objective_s: 0.0005\n", "scaling.ttft_objective_s: Input should be greater than or equal "
                                               "to 0.001"),
    ("- a\n- list\n", "expected a mapping of sections"),
    ("scaling: [unclosed\n", "error: --settings "),
    # inserted into PromQL as names: anything else would be a query the server refuses, or another query
    ("prometheus:\n  target_labels: [job, 'x) or vector(1']\n", "not a label a scrape adds: 'x) or vector(1'"),
    ("prometheus:\n  target_labels: [__name__]\n", "not a label a scrape adds: '__name__'"),
    ("prometheus:\n  target_labels: [job, pod]\n", "target_labels holds pod, the label of a pod's namespace or name"),
    ("prometheus:\n  cluster_labels: ['x\"} or vector(1)']\n", "not a label that names a cluster"),
    ("prometheus:\n  cluster_labels: [namespace]\n", "cluster_labels holds namespace, the label of a pod's"),
    # a cluster's copy of a pod would be read once, as a second scrape is: the larger of the two, neither's own
    ("prometheus:\n  cluster_labels: [cluster, job]\n", "job is in both target_labels and cluster_labels"),
])
def test_a_bad_settings_file_is_one_line_and_exit_2(tmp_path: Path, text: str, line: str) -> None:
    result = report(tmp_path, text)
    assert result.exit_code == 2 and line in result.output and len(result.output.strip().splitlines()) == 1, \
        result.output


def test_a_missing_settings_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", "--demo", "--settings", str(tmp_path / "absent.yaml")])
    assert result.exit_code == 2 and "absent.yaml" in result.output and len(result.output.strip().splitlines()) == 1


def test_flags_given_win_over_the_configmap_which_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("forecast: {max_workloads: 5, horizon_s: 7200}\nscaling: {ttft_objective_s: 1.5}\n"
                    "prometheus: {extra_selector: 'cluster=\"a\"'}\n", encoding="utf-8")
    base = {"namespace": (), "history": "14d", "settings_file": str(path)}
    s = build_settings(base)
    assert (s.forecast.max_workloads, s.forecast.horizon_s, s.scaling.ttft_objective_s) == (5, 7200, 1.5)
    assert s.prometheus.extra_selector == 'cluster="a"' and s.scaling.max_replicas == 100  # the rest: defaults
    s = build_settings({**base, "forecast_max": 7, "settings_data": {"scaling": {"ttft_objective_s": 0.5}}})
    assert (s.forecast.max_workloads, s.forecast.horizon_s, s.scaling.ttft_objective_s) == (7, 7200, 0.5)


@pytest.mark.parametrize(("text", "line"), [
    ("mode: Recommend\nprometheus:\n", "prometheus must be a mapping of settings, not NoneType"),
    ("mode: Recommend\nserve: [8080]\n", "serve must be a mapping of settings, not list"),
    ("mode: Recommend\nscaling: {ttft: 1}\n", "invalid setting scaling.ttft: Extra inputs are not permitted"),
])
def test_a_bad_controller_configmap_section_is_one_line_before_the_cluster_is_asked(tmp_path: Path, text: str,
                                                                                    line: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["controller", "--config", str(path), "--demo", "--once", "--no-serve"])
    assert result.exit_code == 2 and line in result.output and len(result.output.strip().splitlines()) == 1, \
        result.output
