"""A real Prometheus over history built offline, for tests and benchmarks.

Series → OpenMetrics text → ``promtool tsdb create-blocks-from openmetrics`` → blocks → ``prometheus`` on a free
127.0.0.1 port. Needs Debian's ``prometheus`` and ``promtool`` (2.42); nothing here runs at import.

promtool 2.42's OpenMetrics reader checks little beyond a timestamp per sample and the closing ``# EOF`` (not TYPE
lines, family grouping nor ``_total``), so the writer keeps to the spec itself. Names with ``:`` pass as they are.
Callers end their history shortly before now: the server keeps 60 d and looks back only 5 min past the last sample.
"""

from __future__ import annotations

import contextlib
import http.server
import math
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import requests

TYPES = frozenset({"gauge", "counter", "histogram"})
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
_READY_LINE = "Server is ready to receive web requests"
_START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Series:
    """One scraped series: ``name`` is the sample name (``..._total``, ``..._bucket``), not the family."""

    name: str
    labels: Mapping[str, str]
    timestamps_s: np.ndarray
    values: np.ndarray


def prometheus_binaries() -> tuple[str, str] | None:
    """Paths of ``prometheus`` and ``promtool``, or None when either is missing (tests then skip)."""
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    return (prom, tool) if prom and tool else None


def require_prometheus() -> None:
    """For scripts, which cannot skip: stop with one clear line when the binaries are missing."""
    if prometheus_binaries() is None:
        raise SystemExit("needs Debian's prometheus and promtool on PATH: apt-get install -y prometheus")


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def _family(name: str, types: Mapping[str, str]) -> tuple[str, str]:
    """(family, type) of a sample name: the suffix is stripped only when ``types`` says the family has one."""
    for kind, suffixes in _SUFFIXES.items():
        for suffix in suffixes:
            base = name.removesuffix(suffix)
            if base != name and (types.get(base) == kind or types.get(name) == kind):
                return base, kind
    return name, types.get(name, "gauge")


def write_openmetrics(series: Iterable[Series], path: Path, types: Mapping[str, str] | None = None) -> int:
    """Write ``series`` as OpenMetrics, each family contiguous under one ``# TYPE``; returns the samples written.

    ``types`` maps a family (counter: name minus ``_total``; histogram: minus ``_bucket``/``_sum``/``_count``) to
    its type, default gauge. Formatting is one ``repr`` map and one join per series: ~1M samples in about 0.5 s.
    """
    types = types or {}
    if bad := set(types.values()) - TYPES:
        raise ValueError(f"unsupported metric types {sorted(bad)}; use {sorted(TYPES)}")
    families: dict[str, tuple[str, list[str]]] = {}
    samples = 0
    for s in series:
        values = np.asarray(s.values, dtype=float)
        stamps = np.asarray(s.timestamps_s)
        if values.shape != stamps.shape or values.ndim != 1:
            raise ValueError(f"{s.name}: timestamps and values must be 1-d and of one length")
        if not len(values):
            continue
        text = list(map(repr, values.tolist()))
        for i in np.flatnonzero(~np.isfinite(values)).tolist():
            text[i] = "NaN" if math.isnan(values[i]) else ("+Inf" if values[i] > 0 else "-Inf")
        labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
        prefix = f"{s.name}{{{labels}}} " if labels else f"{s.name} "
        family, kind = _family(s.name, types)
        parts = families.setdefault(family, (kind, []))[1]
        parts.append(prefix + f"\n{prefix}".join(map(" ".join, zip(text, map(repr, stamps.tolist()), strict=True))))
        samples += len(values)
    with path.open("w") as f:
        for family, (kind, parts) in families.items():
            f.write(f"# TYPE {family} {kind}\n")
            f.writelines(part + "\n" for part in parts)
        f.write("# EOF\n")
    return samples


def build_tsdb(om_path: Path, data_dir: Path) -> None:
    """Convert OpenMetrics to TSDB blocks in ``data_dir`` (may already hold blocks; overlaps are allowed).

    ``--max-block-duration`` (hidden in 2.42 but accepted) lets 14 days land in a few large blocks, not 2 h ones.
    """
    cmd = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", "--max-block-duration=384h"]
    out = subprocess.run([*cmd, str(om_path), str(data_dir)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines() or [f"exit status {out.returncode}"]
        raise RuntimeError(f"promtool create-blocks-from failed: {lines[-1]}")


def _link_blocks(src: Path, dst: Path) -> None:
    """A private view of ``src``'s blocks, hard-linked where possible: each server gets its own WAL, query log
    and compactions, so two servers can share one ``data_dir`` and neither changes it."""
    for block in src.iterdir():
        if block.is_dir() and (block / "meta.json").is_file():
            shutil.copytree(block, dst / block.name, copy_function=_link_or_copy)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem
        shutil.copy2(src, dst)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PromServer:
    """``with PromServer.from_tsdb(dir) as prom: requests.get(prom.url + "/api/v1/query", ...)``."""

    def __init__(self, data_dir: Path, extra_args: Sequence[str] = (), web_config: str | None = None) -> None:
        self.data_dir = data_dir
        self.extra_args = tuple(extra_args)
        self.web_config = web_config
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: Path | None = None

    @classmethod
    def from_tsdb(cls, data_dir: Path, *, extra_args: Sequence[str] = (), web_config: str | None = None) -> PromServer:
        """``web_config``: YAML for ``--web.config.file`` (e.g. ``basic_auth_users``); ``extra_args`` are appended."""
        return cls(Path(data_dir), extra_args, web_config)

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (benchmarks read its CPU and memory from /proc)."""
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> PromServer:
        near = self.data_dir.parent  # same filesystem, so blocks can be hard-linked
        self._tmp = tmp = Path(tempfile.mkdtemp(prefix="promfixture-", dir=near if os.access(near, os.W_OK) else None))
        try:
            _link_blocks(self.data_dir, tmp / "data")
            (tmp / "prometheus.yml").write_text("global: {scrape_interval: 60s}\n")
            args = [f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}", *self.extra_args]
            if not any(a.startswith("--storage.tsdb.retention") for a in self.extra_args):
                args.append("--storage.tsdb.retention.time=60d")
            if self.web_config is not None:
                (tmp / "web.yml").write_text(self.web_config)
                args.append(f"--web.config.file={tmp / 'web.yml'}")
            for _ in range(3):  # the free port can be taken between probing and binding
                if self._start(args):
                    return self
            raise RuntimeError(f"prometheus did not start:\n{self._log_tail()}")
        except BaseException:
            self._stop()
            raise

    def _start(self, args: list[str]) -> bool:
        """Start on a fresh port and wait for readiness; False only when the port was taken."""
        assert self._tmp is not None
        port = _free_port()
        tls = self.web_config is not None and "tls_server_config" in self.web_config
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        with (self._tmp / "prometheus.log").open("wb") as log:
            self._proc = subprocess.Popen(["prometheus", f"--web.listen-address=127.0.0.1:{port}", *args],
                                          stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                if "address already in use" in self._log_tail():
                    return False
                raise RuntimeError(f"prometheus exited with {self._proc.returncode}:\n{self._log_tail()}")
            if tls:  # a probe would need the client certificate the server may require: the log says when
                if _READY_LINE in self._log_tail(0):
                    return True
                time.sleep(0.05)
                continue
            try:
                code = requests.get(f"{self.url}/-/ready", timeout=1).status_code
            except requests.ConnectionError:
                code = 0
            # Behind basic auth /-/ready answers 401 whether ready or not; the log then says when it is.
            if code == 200 or (code == 401 and _READY_LINE in self._log_tail(0)):
                return True
            time.sleep(0.05)
        raise RuntimeError(f"prometheus not ready after {_START_TIMEOUT_S:.0f} s:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 15) -> str:
        log = self._tmp / "prometheus.log" if self._tmp else None
        text = log.read_text(errors="replace") if log and log.exists() else ""
        return "\n".join(text.splitlines()[-lines:]) if lines else text

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __exit__(self, *exc: object) -> None:
        self._stop()


def instant_query(url: str, query: str, at_s: float) -> list[dict[str, Any]]:
    """The result of a PromQL instant query at ``at_s`` (unix seconds), as a KEDA Prometheus trigger asks it."""
    r = requests.get(f"{url}/api/v1/query", params={"query": query, "time": at_s}, timeout=10)
    assert r.status_code == 200, r.text
    result: list[dict[str, Any]] = r.json()["data"]["result"]
    return result


@contextlib.contextmanager
def loopback_http(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real HTTP server on a free loopback port, answering with ``handler`` in a thread; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextlib.contextmanager
def gateway(target: Callable[[], str], passes: tuple[str, ...] = ("/",), status: int = 404) -> Iterator[str]:
    """A real HTTP gateway on a free loopback port: a GET whose path starts with one of ``passes`` is sent on to
    ``target()`` (read at each request, so a test can switch servers behind one URL), any other answered with
    ``status`` (a tenancy proxy that passes only the query endpoints: 404, or 403). Yields its URL."""

    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not self.path.startswith(passes):
                self.send_error(status)
                return
            with urllib.request.urlopen(target() + self.path, timeout=60) as answer:
                body = answer.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with loopback_http(Gateway) as url:
        yield url


def tsdb_of(series: Iterable[Series], where: Path, types: Mapping[str, str] | None = None) -> Path:
    """A TSDB of ``series`` built in the new folder ``where`` (through OpenMetrics, as ``build_tsdb``); its path."""
    where.mkdir()
    write_openmetrics(series, where / "data.om", types)
    build_tsdb(where / "data.om", where / "tsdb")
    return where / "tsdb"


TARGET_POD_LABELS = ("pod", "namespace", "container")  # what a Kubernetes scrape sets from the target


def dishonoured(s: Series, target: Mapping[str, str]) -> Series:
    """``s`` as a scrape that does not honour its labels (``honor_labels: false``) stores it: the labels it sets
    itself (``target``: the exporter's own pod, namespace and container) replace the series' own, which are kept
    as ``exported_<label>`` where the series had them."""
    labels = {k: v for k, v in s.labels.items() if k not in target}
    labels |= {f"exported_{k}": s.labels[k] for k in target if s.labels.get(k)}
    return Series(s.name, {**labels, **target}, s.timestamps_s, s.values)
