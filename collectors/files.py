"""File source: a :class:`~recommender.core.usage.Snapshot` saved to, and read back from, a directory.

Why a directory of plain files: a snapshot taken from a live cluster can be replayed offline (CI, a
laptop, a bug report), and users can bring metrics from anywhere as a CSV. Layout, format version 1:

- ``snapshot.json``: the window (``start``, ``end``, ``step_s``), ``source``, ``warnings`` and every
  workload with its full allocation, vLLM arguments, labels, annotations, notes, KV capacity and the
  autoscaler that owns its replicas (only when there is one), and the GPU nodes (model, device count,
  MIG state) when known.
- ``usage.parquet``: the usage series in LONG form, one row per (metric, workload, timestamp):
  ``metric`` (a canonical name from recommender.core.usage), ``workload`` (``WorkloadRef.key``),
  ``timestamp`` (UTC), ``value`` (float32: 7 significant digits are plenty for metrics and halve the
  file). Long form keeps one fixed schema whatever the metrics, and is what exporters emit.
- ``usage.csv``: accepted instead of the Parquet file, same columns; timestamps in unix seconds or
  ISO-8601 (a time without an offset is read as UTC). Used only when ``usage.parquet`` is absent.

The document's mapping to and from the typed model is :mod:`collectors.snapshotdoc`.

Typed fields round-trip exactly; values exactly when they are float32-representable. Read frames have
float64 values and a UTC index in pandas' default datetime unit. Unknown metric names are skipped and
usage of workloads missing from ``snapshot.json`` is kept, both with a warning in the snapshot;
anything unreadable raises :class:`~recommender.core.errors.SourceError` with one line naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pandas.tseries.frequencies import to_offset
from pydantic import ValidationError

from collectors.snapshotdoc import SnapshotDoc, without_absent, workload_doc, workload_from_doc
from recommender.core.errors import SourceError
from recommender.core.memory import give_back_freed
from recommender.core.usage import USAGE_METRICS, Snapshot

FORMAT_VERSION = 1
SNAPSHOT_FILE = "snapshot.json"
PARQUET_FILE = "usage.parquet"
CSV_FILE = "usage.csv"
COLUMNS = ("metric", "workload", "timestamp", "value")
# The unit pandas gives date_range/to_datetime here ("ns" in pandas 2, "us" in 3): read frames use it,
# so a frame built the usual way compares equal after a round trip.
_TIME_UNIT = pd.date_range("2000-01-01", periods=1, tz=UTC).unit
_T = TypeVar("_T")


# ---------------------------------------------------------------------------------------------- write


def write_snapshot(snapshot: Snapshot, directory: Path) -> None:
    """Write ``snapshot.json`` and ``usage.parquet`` into ``directory`` (created when missing)."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        doc = SnapshotDoc(format_version=FORMAT_VERSION, start=snapshot.start.isoformat(),
                          end=snapshot.end.isoformat(), step_s=snapshot.step_s, source=snapshot.source,
                          warnings=snapshot.warnings, workloads=tuple(workload_doc(w) for w in snapshot.workloads),
                          nodes=snapshot.nodes)
        text = json.dumps(without_absent(doc.model_dump(mode="json")), indent=2, ensure_ascii=False) + "\n"
        (directory / SNAPSHOT_FILE).write_text(text, encoding="utf-8")
        _write_usage(snapshot.usage, directory / PARQUET_FILE)
    except OSError as exc:
        raise SourceError(f"{exc.filename or directory}: cannot write the snapshot: {exc.strerror}") from None
    except ValidationError as exc:  # a workload whose fields do not have their declared types
        raise SourceError(f"{directory}: cannot write the snapshot: {_first_error(exc)}") from None


_SCHEMA = pa.schema([("metric", pa.dictionary(pa.int32(), pa.string())),
                     ("workload", pa.dictionary(pa.int32(), pa.string())),
                     ("timestamp", pa.timestamp("ns", tz="UTC")), ("value", pa.float32())])


def _write_usage(usage: Mapping[str, pd.DataFrame], path: Path) -> None:
    """Wide frames → one long table in ``path``, a metric at a time (only one metric's rows are ever held), column
    by column so that a series' rows sit together (compresses). Metrics and workloads are written as codes into their
    names, numbered in the order they first appear (as Arrow's dictionary encoding numbers them), so no row holds a
    string of its own."""
    names = list(pd.unique(np.asarray([str(c) for frame in usage.values() for c in frame.columns], dtype=object)))
    code = {name: i for i, name in enumerate(names)}
    metric_names = pa.array([str(metric) for metric in usage], pa.string())
    workload_names = pa.array(names, pa.string())
    with pq.ParquetWriter(path, _SCHEMA, compression="zstd", compression_level=19,
                          use_byte_stream_split=["value"]) as writer:
        for i, frame in enumerate(usage.values()):
            index = _utc_index(pd.DatetimeIndex(frame.index)).as_unit("ns")
            n_rows, n_cols = frame.shape
            keys = np.repeat(np.asarray([code[str(c)] for c in frame.columns], dtype=np.int32), n_rows)
            writer.write_table(pa.table({
                "metric": pa.DictionaryArray.from_arrays(np.full(n_rows * n_cols, i, dtype=np.int32), metric_names),
                "workload": pa.DictionaryArray.from_arrays(keys, workload_names),
                "timestamp": pa.array(np.tile(index.asi8, n_cols), pa.timestamp("ns", tz="UTC")),
                "value": pa.array(frame.to_numpy(dtype="float32").T.ravel(), pa.float32()),
            }, schema=_SCHEMA))


def _utc_index(index: pd.DatetimeIndex) -> pd.DatetimeIndex:
    return index.tz_localize(UTC) if index.tz is None else index.tz_convert(UTC)


# ----------------------------------------------------------------------------------------------- read


def read_snapshot(directory: Path) -> Snapshot:
    """Read a snapshot directory written by :func:`write_snapshot` (or by hand, with ``usage.csv``)."""
    directory = Path(directory)
    if not directory.exists():
        raise SourceError(f"{directory}: snapshot directory does not exist")
    if not directory.is_dir():
        raise SourceError(f"{directory}: not a directory (a snapshot is a directory holding {SNAPSHOT_FILE})")
    doc_path = directory / SNAPSHOT_FILE
    doc = _read_doc(doc_path)
    start, end = _fromiso(doc_path, "start", doc.start), _fromiso(doc_path, "end", doc.end)
    long, path, warnings = _read_long(directory)
    long, skipped = _known_metrics(long, path)
    workloads = tuple(workload_from_doc(w) for w in doc.workloads)
    orphans = _orphans(long, {w.ref.key for w in workloads}, path)
    usage = _wide(long, doc.step_s)
    del long
    pa.default_memory_pool().release_unused()  # the rows' and the decoder's pages, back before the report uses more
    give_back_freed()
    return Snapshot(workloads, usage, start, end, doc.step_s, (*doc.warnings, *warnings, *skipped, *orphans),
                    doc.source, doc.nodes)


def _read_doc(path: Path) -> SnapshotDoc:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SourceError(f"{path}: not found (a snapshot directory holds {SNAPSHOT_FILE} and "
                          f"{PARQUET_FILE} or {CSV_FILE})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SourceError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise SourceError(f"{path}: expected a JSON object at the top, found {type(raw).__name__}")
    version = raw.get("format_version")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise SourceError(f"{path}: format_version {version} is newer than this reader ({FORMAT_VERSION})")
    try:
        return SnapshotDoc.model_validate(raw)
    except ValidationError as exc:
        raise SourceError(f"{path}: {_first_error(exc)}") from None


def _fromiso(path: Path, key: str, value: str) -> datetime:
    """start/end exactly as written (pydantic would swap the tzinfo class); a trailing 'Z' is UTC."""
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise SourceError(f"{path}: {key}: not an ISO-8601 time: {value!r}") from None


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    first = errors[0]
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"{loc or 'document'}: {first['msg']} (got {first.get('input')!r}){more}"


@dataclass(frozen=True)
class _Long:
    """The usage rows as columns of arrays, metrics and workloads as codes into their names (-1: none), so that no
    row holds a string of its own (a snapshot has a row per series and step)."""

    metric_names: np.ndarray  # distinct names (object)
    metric: np.ndarray  # codes into metric_names
    workload_names: np.ndarray  # distinct str keys (object)
    workload: np.ndarray  # codes into workload_names
    timestamp: pd.DatetimeIndex  # UTC, in _TIME_UNIT
    value: np.ndarray  # float64, or float32 as stored

    def rows(self, keep: np.ndarray) -> _Long:
        return replace(self, metric=self.metric[keep], workload=self.workload[keep], timestamp=self.timestamp[keep],
                       value=self.value[keep])


def _read_long(directory: Path) -> tuple[_Long, Path, list[str]]:
    """The long usage table from Parquet, or else CSV, with typed, validated columns."""
    parquet, csv = directory / PARQUET_FILE, directory / CSV_FILE
    warnings = []
    column: Callable[[str], pd.Series]
    if parquet.exists():  # a column at a time (_load_column)
        path, names = parquet, _load(parquet, lambda p: pq.read_schema(p).names)
        column = partial(_load_column, parquet)
        if csv.exists():
            warnings.append(f"{csv}: ignored, {PARQUET_FILE} is read instead")
    elif csv.exists():
        path, raw = csv, _load(csv, lambda p: pd.read_csv(p, dtype={"metric": str, "workload": str}))
        names, column = list(raw.columns), raw.pop
    else:
        raise SourceError(f"{directory}: no usage file ({PARQUET_FILE} or {CSV_FILE})")
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise SourceError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}")
    metrics = pd.Categorical(column("metric"))  # cheap from Parquet's dictionary (categorical) column
    workload_names, workload = _keys(column("workload"), path)
    long = _Long(np.asarray(metrics.categories, dtype=object), np.asarray(metrics.codes), workload_names, workload,
                 pd.DatetimeIndex(_timestamps(column("timestamp"), path)), _values(column("value"), path))
    _no_duplicates(long, path)
    return long, path, warnings


def _load_column(path: Path, name: str) -> pd.Series:
    """One Parquet column as pandas reads it. Times and floats (the largest columns) are copied a row group at a
    time into one array, times already at the frames' unit, so no second copy of the whole column is made."""
    def read(p: Path) -> pd.Series:
        file = pq.ParquetFile(p)
        kind = file.schema_arrow.field(name).type
        if not (pa.types.is_timestamp(kind) or pa.types.is_floating(kind)):
            return file.read(columns=[name]).column(0).to_pandas()
        want = pa.timestamp(_TIME_UNIT) if pa.types.is_timestamp(kind) else kind  # times: UTC instants, as stored
        out = np.empty(file.metadata.num_rows, dtype=want.to_pandas_dtype())
        at = 0
        for group in range(file.num_row_groups):
            chunk = file.read_row_group(group, columns=[name]).column(0)
            if pa.types.is_timestamp(kind):
                chunk = chunk.cast(pa.timestamp(kind.unit)).cast(want, safe=False)  # the tz dropped: the same instants;
                # finer than the frames' unit: truncated, as pandas' as_unit truncates
            values = chunk.to_numpy()
            out[at: at + values.size] = values
            at += values.size
        if pa.types.is_timestamp(kind) and kind.tz is not None:
            return pd.Series(pd.DatetimeIndex(out, copy=False).tz_localize(UTC), name=name, copy=False)
        return pd.Series(out, name=name, copy=False)

    try:
        return _load(path, read)
    finally:
        pa.default_memory_pool().release_unused()


def _load(path: Path, loader: Callable[[Path], _T]) -> _T:
    try:
        loaded = loader(path)
    except (OSError, ValueError, pa.ArrowException, pd.errors.ParserError) as exc:
        kind = "Parquet" if path.suffix == ".parquet" else "CSV"
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SourceError(f"{path}: not a readable {kind} file ({detail})") from None
    return loaded


def _keys(column: pd.Series, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Workload keys as distinct str names and a code per row; checked per distinct key (a few) rather than per
    row (millions)."""
    keys = pd.Categorical(column)  # cheap from Parquet's dictionary (categorical) column
    codes = np.asarray(keys.codes)
    empty = [i for i, k in enumerate(keys.categories) if not str(k).strip()]
    bad = (codes < 0) | np.isin(codes, empty)
    if bad.any():
        raise SourceError(f"{path}: empty workload in row {int(np.flatnonzero(bad)[0]) + 1}")
    distinct, of_category = pd.factorize(np.asarray([str(k) for k in keys.categories], dtype=object))
    return np.asarray(of_category, dtype=object), distinct.astype(codes.dtype)[codes]  # str() can merge two


def _timestamps(column: pd.Series, path: Path) -> pd.Series:
    """UTC times from datetimes, unix seconds, or ISO-8601 strings; the first bad one is named."""
    if isinstance(column.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(column.dtype):
        parsed = pd.to_datetime(column, utc=True)
    else:
        seconds = pd.to_numeric(column, errors="coerce")
        parsed = pd.to_datetime(seconds, unit="s", utc=True)
        text = seconds.isna() & column.notna()
        if text.any():
            parsed[text] = pd.to_datetime(column[text].astype(str), utc=True, format="ISO8601", errors="coerce")
    bad = parsed.isna()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SourceError(f"{path}: bad timestamp {column.iloc[row]!r} in row {row + 1} "
                          "(expected unix seconds or ISO-8601)")
    return parsed.dt.as_unit(_TIME_UNIT)


def _values(column: pd.Series, path: Path) -> np.ndarray:
    """Floats (float32 as stored: each is exact in float64, as the frames hold it); empty and NaN stay NaN, anything
    else non-numeric is an error."""
    if column.dtype == np.float32:
        return column.to_numpy()
    if pd.api.types.is_numeric_dtype(column.dtype):
        return column.to_numpy(dtype="float64")
    values = pd.to_numeric(column, errors="coerce")
    text = column.astype(str).str.strip().str.lower()
    bad = values.isna() & column.notna() & ~text.isin(["", "nan"])
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SourceError(f"{path}: non-numeric value {column.iloc[row]!r} in row {row + 1}")
    return values.to_numpy(dtype="float64")


def _no_duplicates(long: _Long, path: Path) -> None:
    """One line for the rows that repeat an earlier row's metric, workload and time (the first of them named)."""
    if _series_in_runs(long):
        return
    times, distinct = pd.factorize(long.timestamp.asi8)
    widths = (len(long.metric_names) + 1, len(long.workload_names) + 1, max(len(distinct), 1))
    if np.prod(widths, dtype=np.float64) < 2.0**62:  # one int64 per row says all three
        key = ((long.metric.astype(np.int64) + 1) * widths[1] + (long.workload + 1)) * widths[2] + times
        dup = pd.Series(key).duplicated().to_numpy()
    else:
        dup = pd.DataFrame({"m": long.metric, "w": long.workload, "t": times}).duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        metric, workload = _metric_name(long, int(long.metric[row])), long.workload_names[long.workload[row]]
        raise SourceError(f"{path}: {int(dup.sum())} duplicate row(s), first: {metric} {workload} at "
                          f"{long.timestamp[row].isoformat()}")


def _series_in_runs(long: _Long) -> bool:
    """True when each (metric, workload) pair's rows are one run of rising times, as ``write_snapshot`` lays them
    out: then no row repeats another, which this tells in one pass with no hashing of every row."""
    if len(long.metric) < 2:
        return True
    same = (long.metric[1:] == long.metric[:-1]) & (long.workload[1:] == long.workload[:-1])
    if not (np.diff(long.timestamp.asi8)[same] > 0).all():
        return False
    starts = np.concatenate([[0], np.flatnonzero(~same) + 1])
    pairs = long.metric[starts].astype(np.int64) * (len(long.workload_names) + 1) + long.workload[starts]
    return bool(np.unique(pairs).size == pairs.size)


def _metric_name(long: _Long, code: int) -> str:
    """A metric code's name, as str() gave it when rows held names (no name given reads "nan")."""
    return str(long.metric_names[code]) if code >= 0 else "nan"


def _known_metrics(long: _Long, path: Path) -> tuple[_Long, list[str]]:
    known_codes = [i for i, name in enumerate(long.metric_names) if name in USAGE_METRICS]
    known = np.isin(long.metric, known_codes)
    if known.all():
        return long, []
    names = sorted({_metric_name(long, int(code)) for code in np.unique(long.metric[~known])})
    return long.rows(known), [f"{path}: skipped {int((~known).sum())} row(s) of unknown metric(s) "
                              f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"]


def _orphans(long: _Long, known: set[str], path: Path) -> list[str]:
    extra = [k for k in long.workload_names[pd.unique(long.workload)] if k not in known]
    if not extra:
        return []
    return [f"{path}: usage for {len(extra)} workload(s) not in {SNAPSHOT_FILE} (kept, but no workload "
            f"reads it): {', '.join(map(str, extra[:5]))}{' ...' if len(extra) > 5 else ''}"]


def _wide(long: _Long, step_s: float) -> dict[str, pd.DataFrame]:
    """Long rows → one wide frame per metric (in the order metrics first appear), workloads in the order they first
    appear, times sorted; a cell no row gives is NaN."""
    usage = {}
    stamps = long.timestamp.asi8
    column_of = np.empty(len(long.workload_names), dtype=np.int64)
    for code in pd.unique(long.metric):
        rows = np.flatnonzero(long.metric == code)
        workloads = pd.unique(long.workload[rows])
        column_of[workloads] = np.arange(workloads.size)
        times, at = np.unique(stamps[rows], return_inverse=True)
        values = np.full((times.size, workloads.size), np.nan)
        values[at, column_of[long.workload[rows]]] = long.value[rows]
        index = pd.DatetimeIndex(times.astype(f"M8[{_TIME_UNIT}]")).tz_localize(UTC)
        usage[str(long.metric_names[code])] = pd.DataFrame(
            values, index=_with_freq(index, step_s), columns=pd.Index([str(k) for k in long.workload_names[workloads]]),
            copy=False)  # laid out as a pivot's frame was
    return usage


def _with_freq(index: pd.DatetimeIndex, step_s: float) -> pd.DatetimeIndex:
    """Mark a regular grid with its frequency (as date_range would), so resampling needs no guess."""
    index = index.rename(None)
    step = pd.Timedelta(seconds=step_s)
    if len(index) > 1 and step_s > 0 and ((index[1:] - index[:-1]) == step).all():
        return pd.DatetimeIndex(index, freq=to_offset(step))
    return index
