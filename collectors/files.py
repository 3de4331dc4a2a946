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

Typed fields round-trip exactly; values exactly when they are float32-representable. Read frames have
float64 values and a UTC index in pandas' default datetime unit. Unknown metric names are skipped and
usage of workloads missing from ``snapshot.json`` is kept, both with a warning in the snapshot;
anything unreadable raises :class:`~recommender.core.errors.SourceError` with one line naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_type_hints

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pandas.tseries.frequencies import to_offset
from pydantic import BaseModel, ConfigDict, ValidationError

from recommender.core.errors import SourceError
from recommender.core.inventory import Allocation, GpuNode, Sharing, VllmArgs, Workload
from recommender.core.usage import USAGE_METRICS, Snapshot
from recommender.mechanisms import for_sharing

FORMAT_VERSION = 1
SNAPSHOT_FILE = "snapshot.json"
PARQUET_FILE = "usage.parquet"
CSV_FILE = "usage.csv"
COLUMNS = ("metric", "workload", "timestamp", "value")
# The unit pandas gives date_range/to_datetime here ("ns" in pandas 2, "us" in 3): read frames use it,
# so a frame built the usual way compares equal after a round trip.
_TIME_UNIT = pd.date_range("2000-01-01", periods=1, tz=UTC).unit


@dataclass(frozen=True)
class _AllocationDoc:
    """An allocation as snapshot.json writes it: the share's parameters as flat fields (format 1), in this
    order; :func:`_to_allocation` and :func:`_from_allocation` map them to and from the tagged share."""

    sharing: Sharing
    gpus: int = 0
    mig_profile: str | None = None
    mig_count: int = 0
    gpu_equivalents: float = 0.0
    gpu_model: str | None = None
    gpu_product: str | None = None
    device_memory_mib: float | None = None
    mps_active_thread_pct: float | None = None
    mps_pinned_mem_mib: float | None = None
    hami_gpumem_mib: float | None = None
    hami_gpucores_pct: float | None = None
    kai_gpu_fraction: float | None = None
    vllm: VllmArgs | None = None
    replicas: int = 1


_SHARE_FIELDS = ("mig_profile", "mig_count", "mps_active_thread_pct", "mps_pinned_mem_mib", "hami_gpumem_mib",
                 "hami_gpucores_pct", "kai_gpu_fraction")
# Workload with its allocation in the flat form: the same fields, names and error locations
_WorkloadDoc = make_dataclass("Workload", [
    (f.name, _AllocationDoc if f.name == "allocation" else get_type_hints(Workload)[f.name],
     field(default=f.default, default_factory=f.default_factory)) for f in fields(Workload)], frozen=True)


def _to_allocation(doc: _AllocationDoc) -> Allocation:
    values = {f.name: getattr(doc, f.name) for f in fields(doc)}
    mechanism = for_sharing(doc.sharing)
    kind = mechanism.share_type if mechanism is not None else None
    share = kind.from_flat(values) if kind is not None else None
    return Allocation(**{k: v for k, v in values.items() if k not in _SHARE_FIELDS}, share=share)


def _from_allocation(alloc: Allocation) -> _AllocationDoc:
    values = {f.name: getattr(alloc, f.name) for f in fields(alloc) if f.name != "share"}
    return _AllocationDoc(**values, **{k: getattr(alloc, k) for k in _SHARE_FIELDS})


def _workload_doc(w: Workload) -> Any:
    values = {f.name: getattr(w, f.name) for f in fields(w)}
    return _WorkloadDoc(**values | {"allocation": _from_allocation(w.allocation)})


def _workload(doc: Any) -> Workload:
    values = {f.name: getattr(doc, f.name) for f in fields(Workload)}
    return Workload(**values | {"allocation": _to_allocation(doc.allocation)})


class _SnapshotDoc(BaseModel):
    """Boundary schema of snapshot.json; workloads validate straight into the core dataclasses."""

    model_config = ConfigDict(extra="forbid")

    format_version: int
    start: str  # ISO-8601, parsed by datetime.fromisoformat so naive/aware times come back as written
    end: str
    step_s: float
    source: str = "file"
    warnings: tuple[str, ...] = ()
    workloads: tuple[_WorkloadDoc, ...] = ()  # type: ignore[valid-type]
    nodes: tuple[GpuNode, ...] = ()


# ---------------------------------------------------------------------------------------------- write


def write_snapshot(snapshot: Snapshot, directory: Path) -> None:
    """Write ``snapshot.json`` and ``usage.parquet`` into ``directory`` (created when missing)."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        doc = _SnapshotDoc(format_version=FORMAT_VERSION, start=snapshot.start.isoformat(),
                           end=snapshot.end.isoformat(), step_s=snapshot.step_s, source=snapshot.source,
                           warnings=snapshot.warnings, workloads=tuple(_workload_doc(w) for w in snapshot.workloads),
                           nodes=snapshot.nodes)
        text = json.dumps(_without_absent(doc.model_dump(mode="json")), indent=2, ensure_ascii=False) + "\n"
        (directory / SNAPSHOT_FILE).write_text(text, encoding="utf-8")
        pq.write_table(_long_table(snapshot.usage), directory / PARQUET_FILE, compression="zstd",
                       compression_level=19, use_byte_stream_split=["value"])
    except OSError as exc:
        raise SourceError(f"{exc.filename or directory}: cannot write the snapshot: {exc.strerror}") from None
    except ValidationError as exc:  # a workload whose fields do not have their declared types
        raise SourceError(f"{directory}: cannot write the snapshot: {_first_error(exc)}") from None


# workload fields added after format 1 was written: left out when absent
_OPTIONAL_KEYS = ("autoscaler", "device_shared_with")
_OPTIONAL_NODE_KEYS = ("device_plugin_config", "device_plugin", "device_plugin_unknown")


def _without_absent(doc: dict[str, Any]) -> dict[str, Any]:
    """The document less the newer workload and node fields that are None, so a snapshot written without them reads
    (and writes) byte for byte as before; reading fills in their defaults."""
    for w in doc.get("workloads") or []:
        for key in _OPTIONAL_KEYS:
            if w.get(key) is None:
                w.pop(key, None)
    for n in doc.get("nodes") or []:
        for key in _OPTIONAL_NODE_KEYS:
            if n.get(key) is None:
                n.pop(key, None)
    return doc


def _long_table(usage: Mapping[str, pd.DataFrame]) -> pa.Table:
    """Wide frames → one long table, column by column so that a series' rows sit together (compresses)."""
    metrics, keys, times, values = [], [], [], []
    for metric, frame in usage.items():
        index = _utc_index(pd.DatetimeIndex(frame.index)).as_unit("ns")
        n_rows, n_cols = frame.shape
        metrics.append(np.full(n_rows * n_cols, metric, dtype=object))
        keys.append(np.repeat(np.asarray([str(c) for c in frame.columns], dtype=object), n_rows))
        times.append(np.tile(index.asi8, n_cols))
        values.append(frame.to_numpy(dtype="float32").T.ravel())

    def joined(parts: list[np.ndarray], dtype: str) -> np.ndarray:
        return np.concatenate(parts) if parts else np.array([], dtype=dtype)

    return pa.table({
        "metric": pa.array(joined(metrics, "object"), pa.string()).dictionary_encode(),
        "workload": pa.array(joined(keys, "object"), pa.string()).dictionary_encode(),
        "timestamp": pa.array(joined(times, "int64"), pa.timestamp("ns", tz="UTC")),
        "value": pa.array(joined(values, "float32"), pa.float32()),
    })


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
    workloads = tuple(_workload(w) for w in doc.workloads)
    orphans = _orphans(long, {w.ref.key for w in workloads}, path)
    return Snapshot(workloads, _wide(long, doc.step_s), start, end, doc.step_s,
                    (*doc.warnings, *warnings, *skipped, *orphans), doc.source, doc.nodes)


def _read_doc(path: Path) -> _SnapshotDoc:
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
        return _SnapshotDoc.model_validate(raw)
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


def _read_long(directory: Path) -> tuple[pd.DataFrame, Path, list[str]]:
    """The long usage table from Parquet, or else CSV, with typed, validated columns."""
    parquet, csv = directory / PARQUET_FILE, directory / CSV_FILE
    warnings = []
    if parquet.exists():
        path, raw = parquet, _load(parquet, lambda p: pq.read_table(p).to_pandas())
        if csv.exists():
            warnings.append(f"{csv}: ignored, {PARQUET_FILE} is read instead")
    elif csv.exists():
        path, raw = csv, _load(csv, lambda p: pd.read_csv(p, dtype={"metric": str, "workload": str}))
    else:
        raise SourceError(f"{directory}: no usage file ({PARQUET_FILE} or {CSV_FILE})")
    missing = [c for c in COLUMNS if c not in raw.columns]
    if missing:
        raise SourceError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}")
    long = pd.DataFrame({
        "metric": raw["metric"].astype(object), "workload": _keys(raw["workload"], path),
        "timestamp": _timestamps(raw["timestamp"], path), "value": _values(raw["value"], path)})
    _no_duplicates(long, path)
    return long, path, warnings


def _load(path: Path, loader: Callable[[Path], pd.DataFrame]) -> pd.DataFrame:
    try:
        frame = loader(path)
    except (OSError, ValueError, pa.ArrowException, pd.errors.ParserError) as exc:
        kind = "Parquet" if path.suffix == ".parquet" else "CSV"
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SourceError(f"{path}: not a readable {kind} file ({detail})") from None
    return frame


def _keys(column: pd.Series, path: Path) -> pd.Series:
    """Workload keys as str; checked per distinct key (a few) rather than per row (hundreds of thousands)."""
    keys = column.astype(object)  # cheap from Parquet's dictionary (categorical) column
    distinct = pd.unique(keys)
    empty = [k for k in distinct if pd.isna(k) or not str(k).strip()]
    if empty:
        bad = keys.isna() | keys.isin(empty)
        raise SourceError(f"{path}: empty workload in row {int(np.flatnonzero(bad)[0]) + 1}")
    return keys if all(isinstance(k, str) for k in distinct) else keys.map(str)


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


def _values(column: pd.Series, path: Path) -> pd.Series:
    """Floats; empty and NaN stay NaN, anything else non-numeric is an error."""
    if pd.api.types.is_numeric_dtype(column.dtype):
        return column.astype("float64")
    values = pd.to_numeric(column, errors="coerce")
    text = column.astype(str).str.strip().str.lower()
    bad = values.isna() & column.notna() & ~text.isin(["", "nan"])
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SourceError(f"{path}: non-numeric value {column.iloc[row]!r} in row {row + 1}")
    return values.astype("float64")


def _no_duplicates(long: pd.DataFrame, path: Path) -> None:
    dup = long.duplicated(["metric", "workload", "timestamp"])
    if dup.any():
        row = long[dup].iloc[0]
        raise SourceError(f"{path}: {int(dup.sum())} duplicate row(s), first: {row['metric']} "
                          f"{row['workload']} at {row['timestamp'].isoformat()}")


def _known_metrics(long: pd.DataFrame, path: Path) -> tuple[pd.DataFrame, list[str]]:
    known = long["metric"].isin(USAGE_METRICS)
    if known.all():
        return long, []
    names = sorted({str(m) for m in long.loc[~known, "metric"]})
    return long[known], [f"{path}: skipped {int((~known).sum())} row(s) of unknown metric(s) "
                         f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"]


def _orphans(long: pd.DataFrame, known: set[str], path: Path) -> list[str]:
    extra = [k for k in pd.unique(long["workload"]) if k not in known]
    if not extra:
        return []
    return [f"{path}: usage for {len(extra)} workload(s) not in {SNAPSHOT_FILE} (kept, but no workload "
            f"reads it): {', '.join(map(str, extra[:5]))}{' ...' if len(extra) > 5 else ''}"]


def _wide(long: pd.DataFrame, step_s: float) -> dict[str, pd.DataFrame]:
    """Long rows → one wide frame per metric, workloads in the order they first appear."""
    usage = {}
    for metric, rows in long.groupby("metric", sort=False):
        frame = rows.pivot(index="timestamp", columns="workload", values="value")
        frame = frame.reindex(columns=pd.unique(rows["workload"])).sort_index()
        frame.index = _with_freq(pd.DatetimeIndex(frame.index), step_s)
        frame.columns = pd.Index([str(c) for c in frame.columns])
        usage[str(metric)] = frame.astype("float64")
    return usage


def _with_freq(index: pd.DatetimeIndex, step_s: float) -> pd.DatetimeIndex:
    """Mark a regular grid with its frequency (as date_range would), so resampling needs no guess."""
    index = index.rename(None)
    step = pd.Timedelta(seconds=step_s)
    if len(index) > 1 and step_s > 0 and ((index[1:] - index[:-1]) == step).all():
        return pd.DatetimeIndex(index, freq=to_offset(step))
    return index
