"""What names a report's usage cache and what a collection checks it with, without pandas: the reading of the
cluster (server, selection, step, history) the file and the key are made from, the file's place and framing, and
the first step a cache lets a collection read from, and the code version a collection's key holds. A warm report plans
its census from the file's header (:func:`peek`) while the collector and pandas are still importing (``ahead``)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from collectors.prometheus.chunks import Grid, step_for
from collectors.prometheus.queries import Scope
from recommender.core import framing
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from recommender.core.versions import add_files

APP = "gpu-rightsizer"
MAGIC = b"gpu-rightsizer usage cache\n"
FORMAT_VERSION = 4  # 2: each frame one Parquet column, its index and columns in the header; 3: zstd chunks;
# 4: a float32 frame kept at float32 (its dtype in the header), not widened to float64
LENGTH_BYTES = 8  # the body starts with the header's length, then the header (JSON)
OVERLAP_STEPS = 2  # steps of the last collection read again: samples scraped or written late fill them in
_PEEK_BYTES = 64 << 20  # a header longer than this is not peeked at (the collection reads it whole anyway)
_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the packages, in a checkout or installed
# what forms a collection's queries and reads their answers: the collector, pod names, the usage metrics (their
# names, the TTFT buckets the over-objective rate is counted from)
_READ_WITH = ("collectors/prometheus", "collectors/pods.py", "recommender/core/usage.py")


def default_dir() -> Path:
    """The user's cache folder: ``$XDG_CACHE_HOME/gpu-rightsizer``, else ``~/.cache/gpu-rightsizer``."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / APP


def cache_folder(p: PrometheusSettings) -> Path:
    """The folder a report's cache lies in: ``cache_dir``, else :func:`default_dir`."""
    return Path(p.cache_dir).expanduser() if p.cache_dir else default_dir()


def writable(folder: Path) -> bool:
    """Whether a report may keep its cache in ``folder`` (it writes the file there, whole or not at all)."""
    return os.access(folder, os.W_OK | os.X_OK)


def reading(s: Settings) -> tuple[object, ...]:
    """What selects and shapes the series a report reads: server, selection, node labels, step, history, the TTFT
    objective misses are counted against, recorded series. The report cache's file (:func:`file_for`) and the
    key a collection checks its cache with (``collect._collect``) are both made from it."""
    p = s.prometheus
    return (p.url.rstrip("/") if p.url else None, Scope.of(s.namespaces, p), p.node_labels,
            step_for(s.history_s, p), s.history_s, s.scaling.ttft_objective_s, p.recording_rules,
            tuple(sorted(p.recorded_series.items())))


@functools.lru_cache(maxsize=1)
def code_version(root: Path = _ROOT) -> str:
    """A digest of the sources that form a collection's queries and read their answers (:data:`_READ_WITH`, under
    ``root``). A collection's key holds it, so a cache that other code wrote (an upgrade that forms a query
    another way) is read again whole, never joined to steps read the new way; the file keeps its name and is
    replaced."""
    files = []
    for part in _READ_WITH:
        where = root / part
        files += sorted(where.rglob("*.py") if where.is_dir() else [where])
    h = hashlib.sha256()
    add_files(h, ((p.relative_to(root).as_posix(), p) for p in files if p.is_file()))
    return h.hexdigest()


def collection_key(s: Settings, url: str, window_s: int, with_ksm: bool) -> tuple[object, ...]:
    """What a usage collection checks its cache with (:meth:`Mark`'s key, as a digest): the reading, the client's
    URL, the rate window, whether kube-state-metrics is read, the labels that name a cluster (the pods a read
    leaves out) and :func:`code_version`."""
    return (*reading(s), url, window_s, with_ksm, s.prometheus.cluster_labels, code_version())


def digest(key: tuple[object, ...]) -> str:
    """A collection's key as a hash of its repr (strings, numbers, frozen dataclasses: stable across runs)."""
    return hashlib.sha256(repr(key).encode("utf-8")).hexdigest()


def file_for(folder: Path, s: Settings) -> Path:
    """The cache file of one reading of the cluster (:func:`reading`), named by a hash of it: none of it is in the
    name."""
    return folder / f"usage-{digest(reading(s))[:32]}.cache"


@dataclass(frozen=True)
class Mark:
    """Where a cache's series stand: the key they were read under (a digest), whether there are any, their last
    step, the last step when everything was read, how long after that everything is read again (s), and the labels
    dcgm-exporter's series were found to name their pods in (``Scope.exporter``)."""

    key: str | None
    has_series: bool
    last_s: float
    full_s: float
    refresh_s: float
    exporter: tuple[str, str] | None = None


def fresh_start(mark: Mark, key: tuple[object, ...], grid: Grid) -> float | None:
    """The first step to read for ``grid`` with a cache at ``mark``, or None when it cannot serve it (read
    everything): another key, no series, a last step outside the grid, or ``refresh_s`` since the last full read."""
    last = grid.start_s + (grid.n - 1) * grid.step_s
    if mark.key is None or digest(key) != mark.key or not mark.has_series \
            or not grid.start_s <= mark.last_s <= last or last - mark.full_s >= mark.refresh_s:
        return None
    return max(grid.start_s, mark.last_s - (OVERLAP_STEPS - 1) * grid.step_s)


def label_pair(value: object) -> tuple[str, str] | None:
    """Two label names as a file holds them (a JSON list), or None where it holds anything else."""
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    return None


def peek(path: Path) -> Mark | None:
    """The mark of the usage a cache file holds, read from its header alone, unchecked (the checksum covers the
    whole file): a guess at where the collection will start, never data. None where it is not such a file."""
    head = framing.header(MAGIC, FORMAT_VERSION)
    try:
        with open(path, "rb") as fh:
            if fh.read(len(head))[:-framing.DIGITS - 1] != head[:-framing.DIGITS - 1]:
                return None
            size = int.from_bytes(fh.read(LENGTH_BYTES), "big")
            if not 0 < size <= _PEEK_BYTES:
                return None
            usage = json.loads(fh.read(size))["usage"]
        return Mark(str(usage["key"]) if usage["key"] is not None else None, bool(usage["frames"]),
                    float(usage["last_s"]), float(usage["full_s"]), float(usage["refresh_s"]),
                    label_pair(usage.get("exporter")))
    except (OSError, ValueError, KeyError, TypeError):
        return None

