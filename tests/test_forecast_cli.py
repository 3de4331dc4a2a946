"""``rightsizer forecast``: CSV in (unix seconds or ISO 8601), CSV out, one-line errors."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner, Result

from recommender.cli.main import main

START_S = 1_714_521_600  # 2024-05-01T00:00:00Z
STEP_S = 600


def long_frame(seconds: bool = True) -> pd.DataFrame:
    """Two series at 10-minute steps over three days: a daily rhythm, and intermittent bursts."""
    rng = np.random.default_rng(11)
    n = 3 * 144
    t = np.arange(n)
    steady = 20 + 10 * np.sin(2 * np.pi * t / 144) + rng.normal(0, 1, n)
    bursts = np.where(rng.random(n) < 0.1, rng.uniform(1, 5, n), 0.0)
    stamps = START_S + STEP_S * t
    ts: list[object] = list(stamps) if seconds else [pd.Timestamp(s, unit="s").isoformat() + "Z" for s in stamps]
    return pd.concat([pd.DataFrame({"series_id": sid, "timestamp": ts, "value": v})
                      for sid, v in (("chat", steady), ("batch-eval", bursts))], ignore_index=True)


def write(tmp_path: Path, frame: pd.DataFrame | str, name: str = "in.csv") -> str:
    path = tmp_path / name
    if isinstance(frame, str):
        path.write_text(frame)
    else:
        frame.to_csv(path, index=False)
    return str(path)


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, ["forecast", *args], input=stdin)


def output(res: Result) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(res.stdout))


def test_seconds_in_forecasts_out(tmp_path: Path) -> None:
    res = run(write(tmp_path, long_frame()), "--horizon", "6")
    assert res.exit_code == 0, res.output
    out = output(res)
    assert list(out.columns) == ["series_id", "timestamp", "mean", "lo_80", "hi_80", "lo_95", "hi_95", "model"]
    assert out.groupby("series_id").size().to_dict() == {"chat": 6, "batch-eval": 6}
    # the first step follows the last input timestamp: START + (432 - 1 + 1) x 600 s = 2024-05-04T00:00:00Z
    assert out["timestamp"].iloc[0] == "2024-05-04T00:00:00Z" and out["timestamp"].iloc[5] == "2024-05-04T00:50:00Z"
    assert (out["lo_95"] <= out["lo_80"]).all() and (out["lo_80"] <= out["mean"]).all()
    assert (out["mean"] <= out["hi_80"]).all() and (out["hi_80"] <= out["hi_95"]).all()
    assert (out["lo_95"] >= 0).all() and out["model"].str.len().gt(0).all()


def test_iso_timestamps_give_the_same_forecasts(tmp_path: Path) -> None:
    by_seconds = output(run(write(tmp_path, long_frame(), "s.csv"), "--horizon", "4"))
    by_iso = output(run(write(tmp_path, long_frame(seconds=False), "iso.csv"), "--horizon", "4"))
    pd.testing.assert_frame_equal(by_seconds, by_iso)


def test_levels_stdin_and_output_file(tmp_path: Path) -> None:
    text = long_frame().to_csv(index=False)
    dest = tmp_path / "out.csv"
    res = run("-", "--horizon", "3", "--level", "50", "--level", "90", "--output-file", str(dest), stdin=text)
    assert res.exit_code == 0, res.output
    assert res.stdout == "" and "wrote 6 rows for 2 series" in res.stderr
    out = pd.read_csv(dest)
    assert list(out.columns) == ["series_id", "timestamp", "mean", "lo_50", "hi_50", "lo_90", "hi_90", "model"]
    assert ((out["hi_90"] - out["lo_90"]) >= (out["hi_50"] - out["lo_50"])).all()


def test_a_short_series_is_skipped_with_a_warning(tmp_path: Path) -> None:
    frame = pd.concat([long_frame(), pd.DataFrame({"series_id": ["new"], "timestamp": [START_S], "value": [1.0]})])
    res = run(write(tmp_path, frame), "--horizon", "2")
    assert res.exit_code == 0, res.output
    assert set(output(res)["series_id"]) == {"chat", "batch-eval"}
    warning = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert warning == ["warning: series 'new' skipped: 1 finite point(s) of history; a forecast needs at least 3"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("series_id,time,value\na,1,2\n", "missing column(s) timestamp; found: series_id, time, value"),
        ("series_id,timestamp,value\na,yesterday,2\n", "row 2: timestamp 'yesterday' is neither unix seconds nor ISO"),
        ("series_id,timestamp,value\na,1714521600,1\na,2024-05-01T00:10:00Z,2\n",
         "mixed timestamp forms: row 2 is unix seconds, row 3 is not"),
        ("series_id,timestamp,value\na,1714521600000,1\n", "timestamps look like milliseconds"),
        ("series_id,timestamp,value\na,1714521600,lots\n", "row 2: value 'lots' is not a number"),
        ("", "the CSV is empty"),
        ("series_id,timestamp,value\n", "has a header but no rows"),
        ("series_id,timestamp,value\na,1714521600,1\na,1714522200,2\n", "none of its 1 series could be forecast"),
    ],
)
def test_bad_files_end_with_one_line(tmp_path: Path, content: str, message: str) -> None:
    res = run(write(tmp_path, content), "--horizon", "2")
    assert res.exit_code == 2
    lines = [line for line in res.stderr.splitlines() if not line.startswith(("warning:", "forecasting"))]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], res.stderr
    assert "Traceback" not in res.output


def test_missing_file_and_bad_horizon(tmp_path: Path) -> None:
    res = run(str(tmp_path / "nope.csv"), "--horizon", "2")
    assert res.exit_code == 2 and res.stderr.startswith("error: ") and "nope.csv" in res.stderr
    assert run(write(tmp_path, long_frame()), "--horizon", "0").exit_code == 2  # click rejects it
