"""Composed sweep records: each policy's figures from the side that ran it, a client left out where the two sides
disagree on static peak's count or shape, and ours' goal judged again on the composed figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import replay_compose


def fig(gpu_hours: float, pct: float) -> dict[str, float]:
    return {"gpu_hours": gpu_hours, "ttft_violation_pct": pct, "requests": 1000.0}


def record(client: str, policies: dict[str, dict[str, float]], shape: str = "3g.40gb", peak: int = 4,
           **extra: Any) -> dict[str, Any]:
    return {"population": "language/m-mid", "client": client, "half": "report", "shape": shape,
            "static_peak_replicas": peak, "policies": policies, "commit": "abc", "code": "c0de",
            "unavoidable_pct": 0.2, **extra}


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_each_policy_comes_from_the_side_that_ran_it_and_the_goal_is_judged_again(tmp_path: Path) -> None:
    ours = {"static-peak": fig(100, 0.0), "ours": fig(40, 1.1)}
    base = {"static-peak": fig(999, 9.0), "reactive": fig(50, 30.0), "reactive-rightsized": fig(45, 35.0),
            "oracle": fig(20, 0.3), "ours": fig(999, 9.0)}
    current = write(tmp_path / "now.jsonl", [
        record("chunk-1", ours), record("chunk-2", ours, shape="whole GPU"), record("chunk-3", ours),
        record("chunk-4", {"static-peak": fig(100, 0.0), "ours": fig(46, 0.3)})])
    baselines = write(tmp_path / "then.jsonl", [
        record("chunk-1", base, goal={"oracle": True}), record("chunk-2", base),
        record("chunk-4", base, goal={"oracle": False})])
    out = tmp_path / "composed.jsonl"
    assert replay_compose.main([str(out), "--current", str(current), "--baselines", str(baselines)]) == 0
    got = {r["client"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(got) == {"chunk-1", "chunk-4"}  # chunk-2's shape differs, chunk-3 has no baselines
    one = got["chunk-1"]
    assert list(one["policies"]) == list(replay_compose.ORDER)
    assert one["policies"]["static-peak"] == fig(100, 0.0) and one["policies"]["ours"] == fig(40, 1.1)
    assert one["policies"]["reactive"] == fig(50, 30.0) and one["policies"]["oracle"] == fig(20, 0.3)
    assert "now.jsonl" in one["ours_from"] and "then.jsonl" in one["baselines_from"]
    # chunk-1: 0.4x static peak, 0.8x reactive, 0.9 points over the unavoidable: met; chunk-4: 0.92x reactive
    assert one["goal"] == {"ours": True, "oracle": True}
    assert got["chunk-4"]["goal"] == {"ours": False, "oracle": False}


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: Any) -> None:
    assert replay_compose.main([str(tmp_path / "o.jsonl"), "--current", str(tmp_path / "none.jsonl"),
                                "--baselines", str(tmp_path / "none.jsonl")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "o.jsonl").exists()
