"""CSV at the edge of ``rightsizer forecast``: long series in, long forecasts out.

In: ``series_id, timestamp, value`` (a header row; other columns are ignored), timestamps all unix
seconds or all ISO 8601 (naive ones are UTC). Out: ``series_id, timestamp, mean, lo_<l>, hi_<l>...,
model`` with ISO timestamps in UTC (``Z``). Anything wrong with the file is a ``CsvFormatError``
whose message is one line naming the row or column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

from recommender.analysis.forecast.base import level_columns
from recommender.core.errors import RightsizerError
from recommender.core.plan import Forecast

INPUT_COLUMNS = ("series_id", "timestamp", "value")
MAX_ROWS = 5_000_000  # rows one forecast run reads (held as strings while parsed)
MAX_SERIES = 10_000  # series one run forecasts (each is backtested on several models)
LATEST_UNIX_S = 1e11  # later than year 5000: these are milliseconds, not seconds


class CsvFormatError(RightsizerError, ValueError):
    """The input CSV cannot be read as series; the message is one line."""


def read_series_csv(source: str | Path | IO[str], max_rows: int = MAX_ROWS, max_series: int = MAX_SERIES
                    ) -> dict[str, pd.Series]:
    """Series by id, in the order they first appear, each on a UTC DatetimeIndex (unsorted, raw). At most
    ``max_rows`` rows and ``max_series`` series: more is a one-line error, read no further than that."""
    try:
        raw = pd.read_csv(source, dtype=str, keep_default_na=False, skipinitialspace=True, nrows=max_rows + 1)
    except pd.errors.EmptyDataError:
        raise CsvFormatError("the CSV is empty: expected a header series_id,timestamp,value") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise CsvFormatError(f"not a readable CSV: {str(exc).splitlines()[0]}") from None
    raw.columns = [str(c).strip().lower() for c in raw.columns]
    missing = [c for c in INPUT_COLUMNS if c not in raw.columns]
    if missing:
        raise CsvFormatError(f"missing column(s) {', '.join(missing)}; found: {', '.join(raw.columns) or 'none'}")
    if raw.empty:
        raise CsvFormatError("the CSV has a header but no rows")
    if len(raw) > max_rows:
        raise CsvFormatError(f"more than {max_rows:,} rows: split the file (a forecast is per series anyway)")
    count = raw["series_id"].str.strip().nunique()
    if count > max_series:
        raise CsvFormatError(f"{count:,} series, more than the {max_series:,} one run forecasts: split the file")
    times = parse_timestamps(raw["timestamp"])
    values = _parse_values(raw["value"])
    frame = pd.DataFrame({"id": raw["series_id"].str.strip().to_numpy(), "value": values}, index=times)
    return {str(sid): g["value"].rename(str(sid)) for sid, g in frame.groupby("id", sort=False)}


def parse_timestamps(text: pd.Series) -> pd.DatetimeIndex:
    """All unix seconds or all ISO 8601 → UTC; mixed forms, milliseconds and junk are one-line errors."""
    stripped = text.str.strip()
    numeric = pd.to_numeric(stripped, errors="coerce")
    is_num = numeric.notna().to_numpy()
    if is_num.all():
        if (numeric.abs() > LATEST_UNIX_S).any():
            raise CsvFormatError("timestamps look like milliseconds; give unix seconds (divide by 1000) or ISO 8601")
        return pd.DatetimeIndex(pd.to_datetime(numeric.to_numpy(dtype="float64"), unit="s", utc=True))
    if is_num.any():
        first_num, first_iso = int(np.argmax(is_num)), int(np.argmax(~is_num))
        raise CsvFormatError(f"mixed timestamp forms: row {first_num + 2} is unix seconds, row {first_iso + 2} is "
                             "not; use one form per file")
    parsed = pd.to_datetime(stripped, format="ISO8601", utc=True, errors="coerce")
    bad = parsed.isna().to_numpy()
    if bad.any():
        row = int(np.argmax(bad))
        raise CsvFormatError(f"row {row + 2}: timestamp {stripped.iloc[row]!r} is neither unix seconds nor ISO 8601")
    return pd.DatetimeIndex(parsed)


def _parse_values(text: pd.Series) -> np.ndarray:
    """Numbers; empty cells and NaN/null words are missing values, anything else is an error."""
    stripped = text.str.strip()
    values = pd.to_numeric(stripped, errors="coerce").to_numpy(dtype="float64")
    missing_words = stripped.str.lower().isin(["", "nan", "null", "none", "na"]).to_numpy()
    bad = np.isnan(values) & ~missing_words
    if bad.any():
        row = int(np.argmax(bad))
        raise CsvFormatError(f"row {row + 2}: value {stripped.iloc[row]!r} is not a number")
    return values


def forecasts_frame(results: Iterable[tuple[str, Forecast]], levels: Sequence[int]) -> pd.DataFrame:
    """One row per series and future step: ``series_id, timestamp, mean, lo/hi per level, model``."""
    cols = level_columns(levels)
    parts = []
    for sid, fc in results:
        part = fc.frame[cols].copy()
        part.insert(0, "timestamp", iso_utc(pd.DatetimeIndex(fc.frame.index)))
        part.insert(0, "series_id", sid)
        part["model"] = fc.model
        parts.append(part.reset_index(drop=True))
    if not parts:
        return pd.DataFrame(columns=["series_id", "timestamp", *cols, "model"])
    return pd.concat(parts, ignore_index=True)


def iso_utc(index: pd.DatetimeIndex) -> list[str]:
    """ISO 8601 in UTC with a ``Z``, to the second (milliseconds only when a step needs them)."""
    utc = index.tz_convert("UTC") if index.tz is not None else index.tz_localize("UTC")
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if (utc.microsecond != 0).any() else "%Y-%m-%dT%H:%M:%SZ"
    return list(utc.strftime(fmt))


def write_forecasts_csv(frame: pd.DataFrame, dest: str | Path | IO[str]) -> None:
    """The forecasts as CSV (6 significant digits: demand is not known better than that)."""
    frame.to_csv(dest, index=False, float_format="%.6g", lineterminator="\n")
