"""A :class:`UsageCache` kept on disk between reports, so that the next report over the same cluster reads only
the steps added since (and the last ``cachefile.OVERLAP_STEPS`` again), as the controller loop does in memory.

One file per server, selection, step and history, named by a hash of them (the URL and selectors are never
stored in clear; credentials never reach the cache at all): a changed query, selection, step or URL finds no
file or a file whose key does not match, and reads everything. The file is written whole or not at all and
streamed to it frame by frame (``recommender.core.framing``: a magic line, the format version, a SHA-256 of
the body, then the body): a JSON header (what the cache knows besides its series, and each frame's index,
columns, dtype and chunk sizes) and each frame's values, column after column, as float64 bytes (float32 for a
float32 frame: FB used, held compact) in zstd chunks of ``_ROWS`` values (pyarrow's codec: one wide frame is one
array, decompressed chunk by chunk into the frame's own array; no Parquet to import, decode and concatenate).
A file that is not ours, of another version, truncated or altered does not match its checksum or header and is
not used: the caller reads everything and says so in one line. A report decodes the frames on a thread of their
own while its queries run (:class:`~collectors.prometheus.cache.Frames`); frames that then fail to decode are one
warning line too, and a collection that reads everything (``recommender.cli.app``). A report whose collection
changed nothing the file holds (the same window again) does not write it.
"""

from __future__ import annotations

import io
import json
import math
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from collectors.prometheus.cache import Frames, UsageCache
from collectors.prometheus.cachefile import FORMAT_VERSION, LENGTH_BYTES, MAGIC, file_for, label_pair, writable
from collectors.prometheus.devices import DeviceTable
from recommender.core import framing
from recommender.core.memory import give_back_freed
from recommender.core.settings import Settings

# the dtypes a frame's values are kept at, by the name the header gives
_DTYPES: dict[str, np.dtype[Any]] = {"float64": np.dtype(np.float64), "float32": np.dtype(np.float32)}
_CHUNK = 1 << 20  # bytes of the body streamed at a time
_ROWS = 1 << 18  # values per zstd chunk (2 MiB before compression: what writing holds besides the frame)


class CacheFileError(Exception):
    """A cache file that cannot be used (not ours, another version, truncated, altered); the message says why."""


def dumps(cache: UsageCache) -> bytes:
    """The cache as the bytes of one file (what :meth:`DiskCache.save` streams to the file)."""
    return framing.frame(MAGIC, FORMAT_VERSION, _body(cache, io.BytesIO()))


def _body(cache: UsageCache, spool: BinaryIO) -> Iterator[bytes | memoryview]:
    """The file's body in chunks: each frame's values are encoded one at a time into ``spool`` (the header
    before them notes their offsets and lengths), then the header's length and the header, then the spool
    read back in ``_CHUNK``-byte pieces. At most one frame's compressed chunk and one piece are held in memory."""
    header = {"version": FORMAT_VERSION, "usage": _state(cache, "usage", spool),
              "workloads": _state(cache.workloads, "workloads", spool) if cache.workloads is not None else None}
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    yield len(head).to_bytes(LENGTH_BYTES, "big") + head
    del header, head
    spool.seek(0)
    while chunk := spool.read(_CHUNK):
        yield chunk


def loads(data: bytes) -> UsageCache:
    """The cache from :func:`dumps`' bytes; CacheFileError when they are not a whole file of this version."""
    return _loads(data)[0]


def _loads(data: bytes, lazy: bool = False) -> tuple[UsageCache, dict[str, Any]]:
    """:func:`loads`, and the file's header (what :func:`_unchanged` compares a later cache with); ``lazy``:
    the frames decoded on a thread of their own (:class:`Frames`: a decoding error is raised when one is read)."""
    body = framing.read(data, MAGIC, FORMAT_VERSION, "gpu-rightsizer usage cache", CacheFileError)
    try:
        size = int.from_bytes(body[:LENGTH_BYTES], "big")
        header = json.loads(bytes(body[LENGTH_BYTES:LENGTH_BYTES + size]))
        blobs = body[LENGTH_BYTES + size:]
        if header.get("version") != FORMAT_VERSION:
            raise CacheFileError("header of another version")
        cache = _restore(header["usage"], blobs, lazy)
        if header.get("workloads") is not None:
            cache.workloads = _restore(header["workloads"], blobs, lazy)
        return cache, header
    except CacheFileError:
        raise
    except Exception as exc:  # a file whose checksum matches but that we cannot read: treat as not ours
        raise CacheFileError(f"unreadable ({type(exc).__name__})") from None


def _meta(cache: UsageCache, part: str) -> dict[str, Any]:
    """What ``cache`` holds besides its frames' values, as JSON."""
    return {"key": cache.key, "last_s": cache.last_s, "full_s": cache.full_s, "refresh_s": cache.refresh_s,
            "counts": cache.counts,
            "clusters": {pod: [list(pair) for pair in pairs] for pod, pairs in cache.clusters.items()},
            "exporter": list(cache.exporter) if cache.exporter is not None else None,
            "inventory": {k: [[labels, value, t] for labels, value, t in v] for k, v in cache.inventory.items()},
            "devices": _devices(cache.devices) if cache.devices is not None else None, "part": part}


def _state(cache: UsageCache, part: str, spool: BinaryIO) -> dict[str, Any]:
    """What ``cache`` holds as JSON, its frames' values written to ``spool`` (offset, length and chunks noted)."""
    frames = []
    for name, frame in cache.series.items():
        offset = spool.tell()
        chunks = _write_values(frame, spool)
        frames.append([name, offset, spool.tell() - offset, {**_axes(frame), "rows": _ROWS, "chunks": chunks}])
    return {**_meta(cache, part), "frames": frames}


def _axes(frame: pd.DataFrame) -> dict[str, Any]:
    """A frame's index (UTC times) and column names."""
    index = frame.index
    if not isinstance(index, pd.DatetimeIndex):
        raise TypeError("a cached frame's index is not a DatetimeIndex")
    return {"index": index.asi8.tolist(), "unit": index.unit, "tz": str(index.tz) if index.tz else None,
            "columns": [str(c) for c in frame.columns], "dtype": _kept_as(frame).name}


def _kept_as(frame: pd.DataFrame) -> np.dtype[Any]:
    """The dtype a frame's values are kept at: float32 where every column is float32 (and it has one), else
    float64 (a reader takes float64: ``Snapshot.series`` widens float32 exactly)."""
    f32 = _DTYPES["float32"]
    return f32 if len(frame.columns) and all(dt == f32 for dt in frame.dtypes) else _DTYPES["float64"]


def _write_values(frame: pd.DataFrame, out: BinaryIO) -> list[int]:
    """A frame's values, column after column, as bytes of its kept dtype (:func:`_kept_as`) in zstd chunks of
    ``_ROWS`` values written to ``out`` (one chunk's bytes held at a time, not a copy of the frame); the chunks'
    compressed sizes. What the codec freed is handed back to the system (Arrow's allocator keeps it for reuse
    otherwise)."""
    import pyarrow as pa

    codec = pa.Codec("zstd")
    dtype = _kept_as(frame)
    values = np.asfortranarray(frame.to_numpy()).ravel(order="F")  # one block: a view (anything else is made
    sizes = []  # float64 a chunk at a time)
    for lo in range(0, values.size, _ROWS):
        chunk = np.ascontiguousarray(values[lo:lo + _ROWS], dtype=dtype)
        packed = codec.compress(chunk, asbytes=True)
        out.write(packed)
        sizes.append(len(packed))
    pa.default_memory_pool().release_unused()
    return sizes


@dataclass(frozen=True)
class _Stored:
    """One frame as its header entry describes it, checked against its bytes' length: what decoding it needs."""

    raw: memoryview
    index: pd.Index
    columns: pd.Index
    dtype: np.dtype[Any]
    rows: int
    sizes: tuple[int, ...]


def _stored(raw: memoryview, axes: dict[str, Any]) -> _Stored:
    """A frame's header entry (``axes``) with its chunks (``raw``); CacheFileError where they disagree."""
    stamps = np.asarray(axes["index"], dtype="int64").view(f"datetime64[{axes['unit']}]")
    index = pd.DatetimeIndex(stamps)
    if axes["tz"]:
        index = index.tz_localize("UTC").tz_convert(axes["tz"])
    columns = pd.Index([str(c) for c in axes["columns"]])
    rows, sizes = int(axes["rows"]), tuple(int(n) for n in axes["chunks"])
    dtype = _DTYPES.get(str(axes["dtype"]))
    if dtype is None:
        raise CacheFileError("a frame of an unknown dtype")
    total = len(index) * len(columns)
    if rows <= 0 or len(sizes) != -(-total // rows) or sum(sizes) != len(raw) or min(sizes, default=1) <= 0:
        raise CacheFileError("a frame of another shape than its header says")
    return _Stored(raw, index, columns, dtype, rows, sizes)


def _frame(f: _Stored) -> pd.DataFrame:
    """A frame from its chunks, decompressed chunk by chunk into one array the frame holds without a copy."""
    import pyarrow as pa

    codec = pa.Codec("zstd")
    total = len(f.index) * len(f.columns)
    values = np.empty(total, dtype=f.dtype)
    at = 0
    for i, size in enumerate(f.sizes):
        n = min(f.rows, total - i * f.rows)
        chunk = codec.decompress(f.raw[at:at + size], decompressed_size=n * f.dtype.itemsize)
        if chunk.size != n * f.dtype.itemsize:
            raise CacheFileError("a frame of another shape than its header says")
        values[i * f.rows:i * f.rows + n] = np.frombuffer(chunk, dtype=f.dtype)
        at += size
    # the array is the frame's alone: held as it is (pandas 3 copies an array it is given by default)
    return pd.DataFrame(values.reshape((len(f.index), len(f.columns)), order="F"), index=f.index,
                        columns=f.columns, copy=False)


def _frames(stored: dict[str, _Stored]) -> dict[str, pd.DataFrame]:
    """Every frame decoded; a decoding the checks of :func:`_stored` let through still ends as CacheFileError."""
    try:
        return {name: _frame(f) for name, f in stored.items()}
    except CacheFileError:
        raise
    except Exception as exc:
        raise CacheFileError(f"unreadable ({type(exc).__name__})") from None


def _restore(state: dict[str, Any], blobs: memoryview, lazy: bool = False) -> UsageCache:
    """The cache a header part describes; its frames decoded now or (``lazy``) on a thread of their own."""
    stored = {}
    for name, offset, length, axes in state["frames"]:
        raw = blobs[offset:offset + length]  # a view: the chunks are decompressed from the file's bytes
        if len(raw) != length:
            raise CacheFileError("truncated frame")
        stored[str(name)] = _stored(raw, axes)
    series = Frames(list(stored), lambda: _frames(stored)) if lazy else _frames(stored)
    return UsageCache(
        key=str(state["key"]) if state["key"] is not None else None, series=series,
        counts={str(k): int(v) for k, v in state["counts"].items()},
        clusters={str(k): tuple((str(label), str(v)) for label, v in pairs)
                  for k, pairs in state.get("clusters", {}).items()},
        exporter=label_pair(state.get("exporter")),
        inventory={str(k): [(dict(labels), float(value), float(t)) for labels, value, t in v]
                   for k, v in state["inventory"].items()},
        devices=_device_table(state["devices"]) if state["devices"] is not None else None,
        last_s=float(state["last_s"]), full_s=float(state["full_s"]), refresh_s=float(state["refresh_s"]))


def _unchanged(cache: UsageCache, header: dict[str, Any], read: dict[str, Mapping[str, pd.DataFrame]]) -> bool:
    """Whether ``cache`` holds exactly what the file of ``header`` held (``read``: its frames per part, as read
    from it): then writing it again would write the same file."""
    for part, now in (("usage", cache), ("workloads", cache.workloads)):
        was, then = header.get(part), read.get(part)
        if now is None or was is None or then is None:
            if now is None and was is None:
                continue
            return False
        meta = json.loads(json.dumps(_meta(now, part)))  # as the file would hold it
        if meta != {k: v for k, v in was.items() if k != "frames"} or now.series.keys() != then.keys():
            return False
        for name, frame in now.series.items():
            old = then[name]
            kept = _kept_as(frame)
            if not (frame.index.equals(old.index) and frame.columns.equals(old.columns) and kept == _kept_as(old)
                    and same_values(frame.to_numpy(dtype=kept), old.to_numpy(dtype=kept))):
                return False
    return True


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two float64 (or two float32) arrays hold the same values, NaN equal to NaN
    (``np.array_equal(equal_nan=True)``): the same memory in the same layout first (the cached frame itself, handed
    back by the same window's join: nothing to compare), then equal bits (one integer comparison, no NaN masks: a
    frame read back unchanged), the float comparison only where some bits differ (-0.0 and 0.0, NaNs of other
    payloads)."""
    if a.shape != b.shape:
        return False
    if a.dtype == b.dtype and a.strides == b.strides and _address(a) == _address(b):
        return True
    bits = {np.dtype(np.float64): np.int64, np.dtype(np.float32): np.int32}.get(a.dtype)
    if bits is not None and a.dtype == b.dtype and np.array_equal(a.view(bits), b.view(bits)):
        return True
    return bool(np.array_equal(a, b, equal_nan=True))


def _address(a: np.ndarray) -> int:
    """Where an array's first element lies in memory."""
    return int(a.__array_interface__["data"][0])


def _devices(table: DeviceTable) -> dict[str, Any]:
    """The device table; of the instants a device was seen, only those it had several pods (what a collection
    that starts from the cache keeps: :meth:`DeviceTable.forget`)."""
    return {"labels": [table.ns_label, table.pod_label, list(table.node_labels)],
            "shared": [[dev, t, sorted(pods)] for (dev, t), pods in table.on_device.items() if len(pods) > 1],
            "per_pod": table.per_pod}


def _device_table(state: dict[str, Any]) -> DeviceTable:
    ns_label, pod_label, node_labels = state["labels"]
    table = DeviceTable(str(ns_label), str(pod_label), tuple(node_labels))
    table.on_device = defaultdict(set, {(str(dev), float(t)): set(pods) for dev, t, pods in state["shared"]})
    for key, info in state["per_pod"].items():
        info["devices"] = {str(d): float(t) for d, t in info["devices"].items()}
        info["nodes"] = {str(n): float(t) for n, t in info["nodes"].items()}
        info["t"] = float(info["t"])
        if info["mib"] is not None and not math.isfinite(float(info["mib"])):
            info["mib"] = None
        table.per_pod[str(key)] = info
    return table


class DiskCache:
    """The cache file of one report: :meth:`load` before the collection, :meth:`save` after it. Each returns a
    warning line instead of raising: a folder that cannot be used gives no cache (the report reads everything,
    nothing is written), an unusable file an empty cache (the report reads everything, its file replaces it)."""

    def __init__(self, folder: Path, s: Settings) -> None:
        self.folder = folder
        self.path = file_for(folder, s)
        self.broken = False
        # the file's header and frames as read: a cache that still holds just that is not written again
        self._read: tuple[dict[str, Any], dict[str, Mapping[str, pd.DataFrame]]] | None = None

    def load(self) -> tuple[UsageCache | None, str | None]:
        """The cache to collect with (empty where there is no file yet or it is unusable) and a warning line,
        or None and why when the folder cannot be used."""
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # it names the cluster's pods
            if not writable(self.folder):
                raise PermissionError(f"{self.folder} is not writable")
        except OSError as exc:
            return self._broken(f"cache folder {self.folder} cannot be used ({_why(exc)})")
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return UsageCache(), None
        except OSError as exc:
            return self._broken(f"cache file {self.path} cannot be read ({_why(exc)})")
        try:
            cache, header = _loads(data, lazy=True)
        except CacheFileError as exc:  # an empty cache reads everything; its file replaces this one
            return UsageCache(), f"cache file {self.path} not used: {exc}; reading everything from Prometheus"
        frames = {"usage": cache.series}  # replaced, never changed in place, by what the collection keeps
        if cache.workloads is not None:
            frames["workloads"] = cache.workloads.series
        self._read = (header, frames)
        return cache, None

    def discard(self, exc: CacheFileError) -> tuple[UsageCache, str]:
        """An empty cache and a warning line, for a file whose frames failed to decode once read (``exc``, raised
        by :class:`Frames` during the collection): the caller collects everything again; its file replaces this."""
        self._read = None
        return UsageCache(), f"cache file {self.path} not used: {exc}; reading everything from Prometheus"

    def save(self, cache: UsageCache | None) -> str | None:
        """Write ``cache`` whole or not at all; a warning line where it could not be written."""
        if cache is None or self.broken or self._as_read(cache):
            return None
        try:
            with tempfile.TemporaryFile(dir=self.folder) as spool:  # frames' chunks, on the cache's disk
                framing.write(self.path, MAGIC, FORMAT_VERSION, _body(cache, spool))
        except Exception as exc:  # a full disk, a folder made read-only since: the report stands, uncached
            return f"cache file {self.path} not written ({_why(exc)}); the next report reads everything"
        finally:
            give_back_freed()  # the encoder's and the header's buffers, before the pipeline runs
        return None

    def _as_read(self, cache: UsageCache) -> bool:
        """Whether ``cache`` holds just what the file held when read (then it is not written again)."""
        try:
            return self._read is not None and _unchanged(cache, *self._read)
        except CacheFileError:  # the file's frames did not decode: it differs from whatever the cache holds
            return False

    def _broken(self, why: str) -> tuple[None, str]:
        self.broken = True
        return None, f"{why}; reading everything from Prometheus, not cached"


def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
