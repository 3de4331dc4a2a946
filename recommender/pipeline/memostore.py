"""The pipeline's memo (``recommender.pipeline.memo``) kept on disk beside the report cache, so that a report
whose inputs did not change for a workload reuses its features, class, forecasts and scaling plan (and the fleet's
MIG packings' MILP answers).

One file beside the usage cache file, written whole or not at all and framed as the cache file is
(``recommender.core.framing``: a magic line, the format version, a SHA-256 of the body), the body as JSON: the code
version and each entry (key, value). The code version digests the sources and data the derived values are computed
from and the numeric libraries' versions: a file of other code is not used (silently: an upgrade is no fault) and
is replaced. A file that is not ours, of another format, truncated or altered gives one warning line and an empty
memo (everything is computed, and the file replaced); a folder or file that cannot be used gives one warning and no
memo.
Only the entries a report used are written back, so the file holds one fleet's and does not grow.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import policies.packing
import recommender
from policies.replicas.estimates import NoScalingPlan
from recommender.analysis.features import Quantiles, WorkloadFeatures
from recommender.core import framing
from recommender.core.plan import Classification, Forecast, ScalingPlan, WorkloadClass
from recommender.core.versions import add_files, add_library_versions

FORMAT_VERSION = 1
MAGIC = b"gpu-rightsizer pipeline memo\n"
# what the derived values are computed from, under the package: sources and data (the class model's table)
_CODE = ("analysis", "core", "data", "pipeline/run.py", "pipeline/memo.py", "pipeline/memostore.py")
_LIBRARIES = ("numpy", "pandas", "scipy", "statsmodels", "scikit-learn")


class MemoFileError(Exception):
    """A memo file that cannot be used (not ours, another format, truncated, altered); the message says why."""


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of the code and data the memo's values come from, and of the numeric libraries' versions."""
    h = hashlib.sha256(f"{sys.version_info[:3]}".encode())
    add_library_versions(h, _LIBRARIES)
    root = Path(recommender.__file__).parent
    policy = Path(policies.packing.__file__).parent  # the MIG packings' MILP (``milp:``) and the scaling plans
    # (``scaling:``): every policy, the code they import from there
    add_files(h, ((f"policies/{p.relative_to(policy).as_posix()}", p) for p in sorted(policy.rglob("*.py"))))
    for part in _CODE:
        where = root / part
        paths = sorted(where.rglob("*") if where.is_dir() else [where])
        add_files(h, ((p.relative_to(root).as_posix(), p) for p in paths
                      if p.is_file() and p.suffix in (".py", ".csv", ".yaml", ".json")))
    return h.hexdigest()


# ---- values as JSON (exact: floats round-trip through repr; NaN and infinities as JSON's extensions)

def encode(k: str, value: Any) -> Any:
    """A memo value as JSON, by the part its key names."""
    part = k.partition(":")[0]
    if part == "features":
        return dataclasses.asdict(value)
    if part == "class":
        return [value.workload_class.value, float(value.confidence), list(value.evidence), value.source]
    if part == "forecast":
        found, notes = value
        return [[_forecast(f) for f in found], list(notes)]
    if part == "milp":  # policies.packing.solved: pattern counts (or None), proven optimal, why not
        counts, optimal, why = value
        return [None if counts is None else [int(c) for c in counts], bool(optimal), str(why)]
    if part == "scaling":  # a scaling plan within its bounds, or why there is none
        return {"none": list(value.reasons)} if isinstance(value, NoScalingPlan) else _scaling(value)
    raise ValueError(f"no encoding for memo part {part!r}")


def decode(k: str, raw: Any) -> Any:
    """The value :func:`encode` wrote under ``k``."""
    part = k.partition(":")[0]
    if part == "features":
        fields: dict[str, Any] = {name: Quantiles(**raw[name]) if name in _QUANTILES and raw[name] is not None
                                  else raw[name] for name in _FEATURES}
        return WorkloadFeatures(**fields)
    if part == "class":
        cls, confidence, evidence, source = raw
        return Classification(WorkloadClass(cls), float(confidence), tuple(evidence), str(source))
    if part == "forecast":
        found, notes = raw
        return tuple(_unforecast(f) for f in found), tuple(notes)
    if part == "milp":
        counts, optimal, why = raw
        return [None if counts is None else [int(c) for c in counts], bool(optimal), str(why)]
    if part == "scaling":
        return NoScalingPlan(tuple(str(r) for r in raw["none"])) if "none" in raw else _unscaling(raw)
    raise MemoFileError(f"an entry of unknown kind {part[:20]!r}")


_PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(ScalingPlan))


def _scaling(plan: ScalingPlan) -> dict[str, Any]:
    """A scaling plan's fields as JSON (its plan on today's shape nested), each number of the type it had."""
    out: dict[str, Any] = {}
    for name in _PLAN_FIELDS:
        value = getattr(plan, name)
        if name == "on_today":
            out[name] = None if value is None else _scaling(value)
        elif name == "reasons":
            out[name] = [str(r) for r in value]
        elif value is None or isinstance(value, (bool, str)):
            out[name] = value
        elif isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            out[name] = {"i": int(value)}
        elif isinstance(value, (float, np.floating)):
            out[name] = float(value)
        else:
            raise ValueError(f"a scaling plan field {name} of type {type(value).__name__}")
    return out


def _unscaling(raw: dict[str, Any]) -> ScalingPlan:
    fields: dict[str, Any] = {}
    for name in _PLAN_FIELDS:
        value = raw[name]
        if name == "on_today":
            fields[name] = None if value is None else _unscaling(value)
        elif name == "reasons":
            fields[name] = tuple(str(r) for r in value)
        elif isinstance(value, dict):
            fields[name] = int(value["i"])
        else:
            fields[name] = value
    return ScalingPlan(**fields)


_QUANTILES = frozenset(f.name for f in dataclasses.fields(WorkloadFeatures) if "Quantiles" in str(f.type))
_FEATURES = tuple(f.name for f in dataclasses.fields(WorkloadFeatures))  # (dataclasses.fields per entry: 0.05 s)


def _forecast(f: Forecast) -> dict[str, Any]:
    frame, index = f.frame, f.frame.index
    if not isinstance(index, pd.DatetimeIndex) or any(dt != np.float64 for dt in frame.dtypes):
        raise ValueError("a forecast frame that is not float64 over a DatetimeIndex")
    return {"metric": f.metric, "model": f.model, "reasons": list(f.reasons), "smape": f.backtest_smape,
            "mase": f.backtest_mase, "index": index.asi8.tolist(), "unit": index.unit,
            "tz": str(index.tz) if index.tz else None, "freq": index.freqstr, "name": index.name,
            "columns": [str(c) for c in frame.columns],
            "values": frame.to_numpy().T.tolist()}


def _unforecast(raw: dict[str, Any]) -> Forecast:
    stamps = np.asarray(raw["index"], dtype="int64").view(f"datetime64[{raw['unit']}]")
    index = pd.DatetimeIndex(stamps, name=raw["name"])
    if raw["tz"]:
        index = index.tz_localize("UTC").tz_convert(raw["tz"])
    if raw["freq"]:
        index = pd.DatetimeIndex(index, freq=raw["freq"])
    values = np.asarray(raw["values"], dtype="float64").reshape(len(raw["columns"]), len(index)).T
    frame = pd.DataFrame(values, index=index, columns=pd.Index(raw["columns"]))
    return Forecast(metric=raw["metric"], model=raw["model"], frame=frame, reasons=tuple(raw["reasons"]),
                    backtest_smape=raw["smape"], backtest_mase=raw["mase"])


def dumps(entries: dict[str, Any]) -> bytes:
    """Entries (key -> JSON-ready value) as the bytes of one file."""
    body = json.dumps({"version": FORMAT_VERSION, "code": code_version(), "entries": entries},
                      separators=(",", ":")).encode("utf-8")
    return framing.frame(MAGIC, FORMAT_VERSION, (body,))


def loads(data: bytes) -> dict[str, Any] | None:
    """The entries of :func:`dumps`' bytes (JSON-ready values), None when another code version wrote them;
    MemoFileError when they are not a whole file of this format."""
    body = framing.read(data, MAGIC, FORMAT_VERSION, "gpu-rightsizer pipeline memo", MemoFileError)
    try:
        doc = json.loads(bytes(body))
        if doc.get("version") != FORMAT_VERSION or not isinstance(doc.get("entries"), dict):
            raise MemoFileError("header of another format")
    except MemoFileError:
        raise
    except Exception as exc:  # a checksum that matches a body we cannot read: not ours
        raise MemoFileError(f"unreadable ({type(exc).__name__})") from None
    return dict(doc["entries"]) if doc.get("code") == code_version() else None


class DiskMemo(MutableMapping[str, Any]):
    """The memo of one report, read from ``path`` by :meth:`load` and written back by :meth:`save` with the
    entries the report used. Each returns a warning line instead of raising. An entry that cannot be decoded
    is treated as absent (computed again)."""

    def __init__(self, path: Path, quiet: bool = False) -> None:
        self.path = path
        self.quiet = quiet  # the cache file beside it has warned: no second line for the same folder
        self._raw: dict[str, Any] = {}  # as read: decoded when asked for
        self._new: dict[str, Any] = {}
        self._used: set[str] = set()
        self.broken = False
        self.reused = 0

    def load(self) -> str | None:
        """Read the file (none yet: an empty memo); a warning line when it cannot be used."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.broken = True
            return self._say(f"cannot be read ({_why(exc)}); computing every workload, not remembered")
        try:
            self._raw = loads(data) or {}
        except MemoFileError as exc:
            return self._say(f"not used: {exc}; computing every workload")
        return None

    def _say(self, why: str) -> str | None:
        return None if self.quiet else f"cache memo file {self.path} {why}"

    def __getitem__(self, k: str) -> Any:
        if k in self._new:
            self._used.add(k)
            return self._new[k]
        raw = self._raw.get(k)
        if raw is None:
            raise KeyError(k)
        try:
            value = decode(k, raw)
        except Exception:  # an entry this code cannot read (a hand-edited file whose checksum was redone)
            del self._raw[k]
            raise KeyError(k) from None
        self._used.add(k)
        self.reused += 1
        return value

    def __setitem__(self, k: str, value: Any) -> None:
        self._new[k] = value
        self._used.add(k)

    def __delitem__(self, k: str) -> None:
        self._raw.pop(k, None)
        self._new.pop(k, None)
        self._used.discard(k)

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw.keys() | self._new.keys())

    def __len__(self) -> int:
        return len(self._raw.keys() | self._new.keys())

    def __contains__(self, k: object) -> bool:
        return k in self._new or k in self._raw

    def save(self) -> str | None:
        """Write the entries this report used, whole or not at all (not at all when they are what was read);
        a warning line where the file could not be written."""
        from recommender.core.writes import write_file

        if self.broken or (not self._new and self._used == self._raw.keys()):
            return None
        try:
            entries = {k: self._raw[k] if k in self._raw else encode(k, self._new[k]) for k in sorted(self._used)}
            write_file(self.path, dumps(entries))
        except Exception as exc:  # a full disk, a folder made read-only since: the report stands
            return self._say(f"not written ({_why(exc)}); the next report computes every workload")
        return None


def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
