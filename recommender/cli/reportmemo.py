"""A report's whole answer remembered: the rendered report (and the files its format writes beside it) of the
last report whose inputs were exactly these, kept beside the report cache (``usage-<hash>.report``), so that a
report of the same window with nothing changed renders nothing and runs no pipeline.

The key (:func:`report_key`) digests everything the pipeline and a formatter read: the snapshot as collected
(every workload, node and warning as its repr, the window, and each usage frame's metric, columns, index and
values as their bytes), the settings (credentials as whether they are given: the output says no more of them),
the override files' bytes, the policy's name, and a code version (:func:`code_version`: every source and data file
of the three packages, the numeric and rendering libraries' versions and the plugins installed for mechanisms
and policies). Any change computes the report again (the pipeline's own memo then reuses what it can). Only the
formats that render the plan alone (``PLAN_ONLY``: no terminal width, no charts) are remembered.

One file, framed as the cache file is (``recommender.core.framing``), written whole or not at all: a JSON header
line (the key and, per format, the lengths of its pieces) and the texts' bytes. The file keeps no server address
in clear, as the cache file does not: each text is kept split around the URLs' host names and joined again when
read. A file that is not ours, of another format, truncated or altered gives one warning line and a full
computation (and is replaced); a key of other code or inputs is a silent miss.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from recommender.core import framing
from recommender.core.settings import Settings
from recommender.core.usage import Snapshot
from recommender.core.versions import add_files, add_library_versions

FORMAT_VERSION = 1
MAGIC = b"gpu-rightsizer report memo\n"
KEY_VERSION = 1  # bump when what the key covers changes shape
FORMATS = frozenset({"json", "yaml", "csv"})  # recommender.outputs.PLAN_ONLY: rendered from the plan alone
_PACKAGES = ("recommender", "policies", "collectors")
_SUFFIXES = (".py", ".csv", ".yaml", ".json", ".css")
_LIBRARIES = ("numpy", "pandas", "pyarrow", "scipy", "statsmodels", "scikit-learn", "pydantic", "pydantic-core",
              "PyYAML")
_PLUGINS = ("gpu_rightsizer.mechanisms", "gpu_rightsizer.policies")  # read by name inside the pipeline
DIGEST_COLUMNS = 256  # columns of a usage frame hashed at once (a copy of at most these, not the frame)

Rendered = dict[str, tuple[str, dict[str, str]]]  # format -> (report, files beside it: suffix -> text)


class ReportMemoError(Exception):
    """A report memo file that cannot be used (not ours, another format, truncated, altered); says why."""


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of every source and data file of the three packages, the interpreter's and the numeric and
    rendering libraries' versions, and the mechanism and policy plugins installed."""
    h = hashlib.sha256(f"{KEY_VERSION}|{sys.version_info[:3]}".encode())
    add_library_versions(h, _LIBRARIES)
    for group in _PLUGINS:
        found = sorted((ep.name, ep.value) for ep in metadata.entry_points(group=group))
        h.update(f"{group}={found!r};".encode())
    for package in _PACKAGES:
        spec = find_spec(package)
        root = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else Path(package)
        add_files(h, ((f"{package}/{p.relative_to(root).as_posix()}", p) for p in sorted(root.rglob("*"))
                      if p.suffix in _SUFFIXES and p.is_file()))
    return h.hexdigest()


def snapshot_digest(snap: Snapshot) -> str | None:
    """A digest of the snapshot as the pipeline reads it; None where a usage frame holds other than numbers."""
    import numpy as np
    import pandas as pd

    h = hashlib.sha256(repr((KEY_VERSION, snap.start, snap.end, snap.step_s, snap.source, snap.warnings,
                             snap.workloads, snap.nodes, len(snap.usage))).encode("utf-8"))
    for metric in sorted(snap.usage):
        frame = snap.usage[metric]
        types = set(frame.dtypes)  # the distinct dtypes, read once (str of each column's: 2,000 calls a frame)
        kinds = {d.kind for d in types}
        if not kinds <= set("fiub") or ("b" in kinds and len(kinds) > 1):  # pandas would hold objects
            return None
        dtypes = {str(d) for d in types}
        common = np.result_type(*types) if len(frame.columns) else np.dtype("float64")
        index = frame.index
        head: tuple[object, ...] = (metric, frame.shape, str(common), sorted(dtypes), list(frame.columns),
                                    frame.columns.name, index.name, type(index).__name__)
        if isinstance(index, pd.DatetimeIndex):
            head += (str(index.tz), index.unit, index.freqstr)
            stamps = index.asi8.tobytes()
        else:
            stamps = repr(list(index)).encode("utf-8")
        h.update(repr(head).encode("utf-8"))
        h.update(stamps)
        for at in range(0, len(frame.columns), DIGEST_COLUMNS):  # each column's bytes in turn, a few at a time:
            part = frame.iloc[:, at:at + DIGEST_COLUMNS].to_numpy(dtype=common)  # never a copy of the whole frame
            part = part if part.flags.f_contiguous else np.asfortranarray(part)
            h.update(part.T.data if part.size else b"")
    return h.hexdigest()


def _settings_text(settings: Settings) -> str:
    """The settings as JSON, credentials only as whether they are given (all the output says of them)."""
    raw = settings.model_dump(mode="json")
    for name in ("bearer_token", "password"):
        raw["prometheus"][name] = raw["prometheus"].get(name) is not None
    return json.dumps(raw, sort_keys=True)


def _file_bytes(path: str | None) -> str:
    """An override file's digest (or why it cannot be read: the run then fails as it would have)."""
    if path is None:
        return "-"
    try:
        return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()
    except OSError as exc:
        return f"unreadable {type(exc).__name__}"


def report_key(snap: Snapshot, settings: Settings, policy: str) -> str | None:
    """The key of one report's answer (None: not to be remembered, a frame of other than numbers)."""
    digest = snapshot_digest(snap)
    if digest is None:
        return None
    text = repr((KEY_VERSION, code_version(), policy, _settings_text(settings),
                 _file_bytes(settings.policy.catalogue_override), _file_bytes(settings.policy.models_override),
                 digest))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _hosts(settings: Settings) -> list[str]:
    """What of the URLs the settings hold the file must not keep in clear: each one's netloc, with and without its
    user:password@ (the report writes it without), longest first."""
    found: set[str] = set()
    for url in (settings.prometheus.url, settings.scaling.keda_prometheus_url):
        if url:
            netloc = urlsplit(url.strip()).netloc
            found.update(x for x in (netloc, netloc.rpartition("@")[2]) if x)
    return sorted(found, key=lambda x: (-len(x), x))


def _split(text: str, hosts: list[str]) -> list[tuple[int, str]]:
    """``text`` as pieces, each after the host (an index in ``hosts``, -1 for the first) that stood before it."""
    pieces = [(-1, text)]
    for i, host in enumerate(hosts):
        out = []
        for before, piece in pieces:
            first, *rest = piece.split(host)
            out.append((before, first))
            out.extend((i, p) for p in rest)
        pieces = out
    return pieces


def dumps(key: str, rendered: Rendered, hosts: list[str]) -> list[bytes]:
    """The file's body: the header line and the pieces' bytes, in order."""
    blobs: list[bytes] = []
    formats: dict[str, Any] = {}

    def kept(text: str) -> list[list[int]]:
        out = []
        for host, piece in _split(text, hosts):
            raw = piece.encode("utf-8")
            blobs.append(raw)
            out.append([host, len(raw)])
        return out

    for fmt, (text, beside) in sorted(rendered.items()):
        formats[fmt] = [kept(text), {suffix: kept(beside[suffix]) for suffix in sorted(beside)}]
    header = json.dumps({"version": FORMAT_VERSION, "key": key, "formats": formats},
                        separators=(",", ":")).encode("utf-8") + b"\n"
    return [header, *blobs]


def loads(data: bytes, hosts: list[str], key: str | None = None) -> tuple[str, Rendered]:
    """The key and what :func:`dumps` wrote (nothing where it was written under another ``key`` than the one
    given); ReportMemoError where the bytes are not a whole file of ours."""
    body = framing.read(data, MAGIC, FORMAT_VERSION, "gpu-rightsizer report memo", ReportMemoError)
    try:
        end = bytes(body[:1 << 20]).index(b"\n")
        doc = json.loads(bytes(body[:end]))
        if doc.get("version") != FORMAT_VERSION or not isinstance(doc.get("formats"), dict):
            raise ReportMemoError("header of another format")
        if key is not None and doc.get("key") != key:
            return str(doc.get("key")), {}
        at = end + 1

        def text(pieces: list[list[int]]) -> str:
            nonlocal at
            out: list[bytes | memoryview] = []  # joined as bytes and decoded once: one copy of a 10 MB report
            for host, size in pieces:
                if not -1 <= host < len(hosts) or size < 0 or at + size > len(body):
                    raise ReportMemoError("a piece outside the file")
                out.extend(((hosts[host].encode("utf-8"),) if host >= 0 else ()) + (body[at:at + size],))
                at += size
            return str(out[0] if len(out) == 1 else b"".join(out), "utf-8")

        rendered = {str(fmt): (text(main), {str(s): text(p) for s, p in beside.items()})
                    for fmt, (main, beside) in doc["formats"].items()}
        if at != len(body):
            raise ReportMemoError("pieces that do not fill the file")
    except ReportMemoError:
        raise
    except Exception as exc:  # a checksum that matches a body we cannot read: not ours
        raise ReportMemoError(f"unreadable ({type(exc).__name__})") from None
    return str(doc.get("key")), rendered


class ReportMemo:
    """The report memo file beside the cache file: :meth:`found` before the pipeline, :meth:`keep` after it. Each
    returns a warning line instead of raising."""

    def __init__(self, path: Path, settings: Settings, quiet: bool = False) -> None:
        self.path = path
        self.quiet = quiet  # the cache file beside it has warned: no second line for the same folder
        self._hosts = _hosts(settings)
        self._kept: tuple[str, Rendered] | None = None

    def found(self, key: str, fmts: tuple[str, ...]) -> tuple[Rendered | None, str | None]:
        """The reports of ``fmts`` kept under ``key`` (None where the file holds another key or not all of them)
        and a warning line where the file cannot be used."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, self._say(f"cannot be read ({_why(exc)}); computing the report")
        try:
            kept, rendered = loads(data, self._hosts, key)
        except ReportMemoError as exc:
            return None, self._say(f"not used: {exc}; computing the report")
        if kept != key:
            return None, None
        self._kept = (kept, rendered)
        if not set(fmts) <= rendered.keys():
            return None, None
        return {f: rendered[f] for f in fmts}, None

    def keep(self, key: str, rendered: Rendered) -> str | None:
        """Write ``rendered`` under ``key`` (with the other formats the file held under the same key), whole or
        not at all; a warning line where it could not be written."""
        both = {**(self._kept[1] if self._kept is not None and self._kept[0] == key else {}),
                **{f: r for f, r in rendered.items() if f in FORMATS}}
        try:
            framing.write(self.path, MAGIC, FORMAT_VERSION, dumps(key, both, self._hosts))
        except Exception as exc:  # a full disk, a folder made read-only since: the report stands
            return self._say(f"not written ({_why(exc)}); the next report is computed again")
        return None

    def _say(self, why: str) -> str | None:
        return None if self.quiet else f"report memo file {self.path} {why}"


def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
