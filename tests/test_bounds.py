"""Every size a user can ask for is bounded, and asking for more is one line, not a process that grows
until the machine gives out (forecast horizon: tests/test_writes.py)."""

from __future__ import annotations

import io

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from recommender.analysis.forecast.csvio import CsvFormatError, read_series_csv
from recommender.cli.main import main
from recommender.core.settings import PrometheusSettings, Settings


def test_history_is_at_most_a_year_and_says_so_in_one_line() -> None:
    out = CliRunner().invoke(main, ["report", "--demo", "--history", "400d"])
    lines = out.output.strip().splitlines()
    assert out.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: invalid setting history_s")
    Settings(history_s=366 * 86_400.0)  # a year is fine


def test_points_per_series_are_bounded() -> None:
    with pytest.raises(ValidationError):
        PrometheusSettings(target_points=1_000_000)


def rows(series: int, per: int) -> io.StringIO:
    body = "".join(f"s{i},{600 * j},{j}\n" for i in range(series) for j in range(per))
    return io.StringIO("series_id,timestamp,value\n" + body)


def test_a_forecast_input_with_too_many_rows_or_series_is_one_line() -> None:
    assert len(read_series_csv(rows(3, 4), max_rows=12, max_series=3)) == 3  # 12 rows, 3 series: at the bounds
    with pytest.raises(CsvFormatError, match="more than 11 rows"):
        read_series_csv(rows(3, 4), max_rows=11)
    with pytest.raises(CsvFormatError, match="3 series, more than the 2 one run forecasts"):
        read_series_csv(rows(3, 4), max_series=2)
