"""Reports keep what they read on disk (``--cache-dir``): the next report over the same cluster reads only the
new steps and gives what an uncached report gives; a changed selection, step or URL, ``--no-cache``, and a
cache folder or file that cannot be used all read everything (the last two with one warning line)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from collectors.prometheus import cachefile, store
from collectors.prometheus.cache import UsageCache
from collectors.prometheus.chunks import Grid
from collectors.prometheus.devices import DeviceTable
from recommender.cli.main import main
from recommender.core.settings import Settings
from recommender.core.settings_sources import PrometheusSettings
from tests.promcluster import Cluster

pytestmark = pytest.mark.prometheus
_POINTS = re.compile(r"^prometheus: \d+ queries .*?, ([\d,]+) points;", re.MULTILINE)
_INCREMENTAL = "earlier steps from the last collection"


class Report:
    def __init__(self, res: Any) -> None:
        assert res.exit_code == 0, res.output
        self.doc: dict[str, Any] = json.loads(res.stdout)
        self.err: str = res.stderr
        found = _POINTS.findall(self.err)
        assert len(found) == 1, self.err
        self.points = int(found[0].replace(",", ""))
        self.warnings = [line for line in self.err.splitlines() if line.startswith("warning: cache")]
        self.incremental = _INCREMENTAL in self.err


def caches(folder: Path) -> list[Path]:
    """The report cache files in ``folder`` (the pipeline's memo lies beside each: tests/test_report_memo.py)."""
    return sorted(f for f in folder.iterdir() if f.suffix == ".cache")


def report(c: Cluster, cache: Path | str | None, *extra: str, end_h: float = 0.0, url: str | None = None) -> Report:
    where = ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    end = (c.end - timedelta(hours=end_h)).isoformat()
    res = CliRunner().invoke(main, ["report", "--prometheus-url", url or c.url, "--no-kubernetes", "--history", "2d",
                                    "--min-history", "12h", "--end", end, "-o", "json", *where, *extra],
                             catch_exceptions=False)
    return Report(res)


@pytest.fixture(scope="module")
def uncached(cluster: Cluster) -> Report:
    return report(cluster, None)


def test_a_later_report_reads_only_the_new_steps_and_gives_the_uncached_answer(cluster: Cluster, uncached: Report,
                                                                               tmp_path: Path) -> None:
    first = report(cluster, tmp_path, end_h=3)
    assert not first.incremental and len(caches(tmp_path)) == 1
    later = report(cluster, tmp_path)
    assert later.incremental and not later.warnings
    assert later.doc == uncached.doc
    assert later.points < uncached.points / 5  # 3 h and the 2 re-read steps of a 2-day window
    (cached,) = caches(tmp_path)
    written = cached.stat()
    again = report(cluster, tmp_path)  # the same window: only the last two steps are read again
    assert again.doc == uncached.doc and again.points < later.points
    assert (cached.stat().st_ino, cached.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)  # unchanged:
    # not written again
    assert "over 2 steps of 120 s (1,438 earlier steps from the last collection)" in again.err  # 2 d at 120 s


def test_a_changed_namespace_step_or_url_does_not_reuse_the_cache(cluster: Cluster, tmp_path: Path) -> None:
    report(cluster, tmp_path)
    assert report(cluster, tmp_path).incremental
    mig = report(cluster, tmp_path, "-n", "mig")
    assert not mig.incremental and mig.points == report(cluster, None, "-n", "mig").points
    longer = report(cluster, tmp_path, "--history", "3d")  # 3 d / 2,016 points: a 180 s step, not 120 s
    assert not longer.incremental and longer.doc["window"]["step_s"] == 180
    other = cluster.url.replace("127.0.0.1", "localhost")  # the same server under another URL
    assert other != cluster.url
    assert not report(cluster, tmp_path, url=other).incremental
    assert len(caches(tmp_path)) == 4


def test_no_cache_reads_everything_and_writes_nothing(cluster: Cluster, uncached: Report, tmp_path: Path) -> None:
    report(cluster, tmp_path)
    before = {f: f.read_bytes() for f in tmp_path.iterdir()}
    res = CliRunner().invoke(main, ["report", "--prometheus-url", cluster.url, "--no-kubernetes", "--history", "2d",
                                    "--min-history", "12h", "--end", cluster.end.isoformat(), "-o", "json",
                                    "--cache-dir", str(tmp_path), "--no-cache"], catch_exceptions=False)
    plain = Report(res)
    assert not plain.incremental and plain.points == uncached.points
    assert {f: f.read_bytes() for f in tmp_path.iterdir()} == before  # neither the cache nor the memo beside it


def test_the_cache_keeps_no_url_in_clear(cluster: Cluster, tmp_path: Path) -> None:
    report(cluster, tmp_path)
    host = cluster.url.split("//")[1]
    assert len(list(tmp_path.iterdir())) == 3  # the cache, the pipeline's memo and the report memo beside it
    for cached in tmp_path.iterdir():
        assert host not in cached.name and host.encode() not in cached.read_bytes()


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _other_version(data: bytes) -> bytes:
    return data.replace(cachefile.MAGIC + f"{cachefile.FORMAT_VERSION}\n".encode(), cachefile.MAGIC + b"99\n", 1)


def _flipped(data: bytes) -> bytes:
    i = len(data) - 100
    return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]


@pytest.mark.parametrize("spoil", [_truncate, _other_version, _flipped, lambda _: b"", lambda _: b"not a cache\n"],
                         ids=["truncated", "other-version", "altered", "empty", "foreign"])
def test_a_spoilt_cache_file_is_one_warning_and_a_full_correct_read(cluster: Cluster, uncached: Report,
                                                                    tmp_path: Path, spoil: Any) -> None:
    report(cluster, tmp_path, end_h=3)
    (cached,) = caches(tmp_path)
    cached.write_bytes(spoil(cached.read_bytes()))
    spoilt = report(cluster, tmp_path)
    assert len(spoilt.warnings) == 1 and str(cached) in spoilt.warnings[0]
    # an altered body still has a header the census sent ahead trusted: that census is counted, never used
    assert not spoilt.incremental and spoilt.doc == uncached.doc
    assert spoilt.points == uncached.points or (spoilt.points > uncached.points and spoil is _flipped)
    healed = report(cluster, tmp_path)  # the spoilt file was replaced by a whole one
    assert healed.incremental and not healed.warnings and healed.doc == uncached.doc


def test_a_cache_folder_that_cannot_be_made_is_one_warning_and_an_uncached_report(
        cluster: Cluster, uncached: Report, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way")
    res = report(cluster, tmp_path / "file" / "cache")
    assert len(res.warnings) == 1 and "cannot be used" in res.warnings[0]
    assert res.doc == uncached.doc and res.points == uncached.points


def test_a_cache_that_cannot_be_written_is_one_warning_and_the_report_stands(
        cluster: Cluster, uncached: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from recommender.core import writes

    def full(path: Path | str, data: Any) -> None:
        raise writes.OutputError(f"{path}: cannot write: No space left on device")

    monkeypatch.setattr(writes, "write_file", full)  # the memo's bytes
    monkeypatch.setattr(writes, "write_with", full)  # the cache, streamed (recommender.core.framing)
    res = report(cluster, tmp_path)
    assert len(res.warnings) == 1 and "No space left on device" in res.warnings[0]
    assert res.doc == uncached.doc and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["report", "snapshot"])
def test_a_warm_run_uses_the_census_it_sent_ahead(cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  command: str) -> None:
    from collectors.prometheus import ahead

    sent = []

    def recorded(*args: Any) -> Any:
        sent.append(ahead_census(*args))
        return sent[-1]

    ahead_census = ahead.census_ahead
    monkeypatch.setattr(ahead, "census_ahead", recorded)
    end = cluster.end.isoformat()
    args = ["--prometheus-url", cluster.url, "--no-kubernetes", "--history", "2d", "--min-history", "12h", "--end",
            end, "--cache-dir", str(tmp_path / "cache")]
    out = ["--output-dir", str(tmp_path / "snap")] if command == "snapshot" else ["-o", "json"]
    for _ in range(2):
        res = CliRunner().invoke(main, [command, *args, *out], catch_exceptions=False)
        assert res.exit_code == 0, res.output
    first, second = sent  # nothing to send ahead without a cache file, then the census of the new steps
    assert first is None and second is not None and second.promised == 0 and _INCREMENTAL in res.stderr


def test_snapshot_keeps_the_cache_too(cluster: Cluster, uncached: Report, tmp_path: Path) -> None:
    report(cluster, tmp_path / "cache", end_h=2)
    res = CliRunner().invoke(main, ["snapshot", "--prometheus-url", cluster.url, "--no-kubernetes", "--history", "2d",
                                    "--end", cluster.end.isoformat(), "--cache-dir", str(tmp_path / "cache"),
                                    "--output-dir", str(tmp_path / "snap")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert _INCREMENTAL in res.stderr
    offline = CliRunner().invoke(main, ["report", "--snapshot", str(tmp_path / "snap"), "--min-history", "12h",
                                        "-o", "json"], catch_exceptions=False)
    doc = json.loads(offline.stdout)  # what a snapshot keeps, as test_prometheus_report compares it
    assert doc["summary"] == uncached.doc["summary"]
    assert [(w["name"], w["recommended"], w["reasons"]) for w in doc["workloads"]] == \
        [(w["name"], w["recommended"], w["reasons"]) for w in uncached.doc["workloads"]]


def test_the_default_folder_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cachefile.default_dir() == tmp_path / "gpu-rightsizer"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the spec: a relative path is ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cachefile.default_dir() == tmp_path / "home" / ".cache" / "gpu-rightsizer"


def test_a_cache_file_holds_what_the_cache_held() -> None:
    grid = Grid(0.0, 60.0, 3)
    frame = pd.DataFrame({"a/p-1": [1.0, float("nan"), 3.0], "a/p-2": [0.5, 0.25, 0.0]}, index=grid.index())
    table = DeviceTable("namespace", "pod", ("Hostname",)).add([
        {"metric": {"namespace": "a", "pod": p, "UUID": "GPU-1", "Hostname": "n1", "modelName": "NVIDIA A100"},
         "values": [[0, "100"], [60, "200"]]} for p in ("p-1", "p-2")])
    cache = UsageCache(key="k", series={"fb_used_mib": frame}, counts={"DCGM_FI_DEV_FB_USED": 2},
                       inventory={"requests": [({"namespace": "a", "pod": "p-1"}, 1.0, 60.0)]}, devices=table,
                       last_s=120.0, full_s=120.0, workloads=UsageCache(key="w", series={"replicas": frame[["a/p-2"]]}),
                       clusters={"a/p-1": (("cluster", "a"), ("cluster", "b")), "a/p-2": (("cluster", "b"),)})
    back = store.loads(store.dumps(cache))
    pd.testing.assert_frame_equal(back.series["fb_used_mib"], frame, check_freq=False)
    assert (back.key, back.counts, back.inventory, back.last_s, back.full_s, back.clusters) == \
        ("k", cache.counts, cache.inventory, 120.0, 120.0, cache.clusters)
    assert back.devices is not None and back.devices.records() == table.records()
    assert back.workloads is not None and back.workloads.key == "w"
    pd.testing.assert_frame_equal(back.workloads.series["replicas"], frame[["a/p-2"]], check_freq=False)
    read = back.series["fb_used_mib"]  # the frames read are held without a copy, yet are the frame's own to change
    read.iloc[0, 0] = 9.0
    assert read.iloc[0, 0] == 9.0 and frame.iloc[0, 0] == 1.0


def test_a_peek_at_the_header_gives_where_the_cache_stands_or_nothing(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a/p-1": [1.0, 2.0]}, index=Grid(0.0, 60.0, 2).index())
    data = store.dumps(UsageCache(key="k", series={"fb_used_mib": frame}, last_s=60.0, full_s=0.0, refresh_s=600.0))
    path = tmp_path / "usage.cache"
    path.write_bytes(data)
    assert cachefile.peek(path) == cachefile.Mark("k", True, 60.0, 0.0, 600.0)
    path.write_bytes(store.dumps(UsageCache()))  # nothing read yet: no key, no series
    assert cachefile.peek(path) == cachefile.Mark(None, False, float("-inf"), float("-inf"), 86_400.0)
    for spoilt in (_truncate(data)[:40], _other_version(data), b"", b"not a cache\n", data[:len(data) // 3]):
        path.write_bytes(spoilt)
        assert cachefile.peek(path) is None
    assert cachefile.peek(tmp_path / "none.cache") is None


def test_every_spoilt_file_is_refused_not_misread() -> None:
    data = store.dumps(UsageCache(key="k", series={"m": pd.DataFrame({"x": [1.0]}, index=Grid(0.0, 60.0, 1).index())}))
    for bad in (_truncate(data), _other_version(data), _flipped(data), data[:-1], data + b"x", b""):
        with pytest.raises(store.CacheFileError):
            store.loads(bad)


def _saved(folder: Path) -> tuple[dict[str, pd.DataFrame], Settings, store.DiskCache]:
    """Two frames of 500 steps saved as a cache file in ``folder``: the frames, the settings and the file."""
    index = Grid(0.0, 60.0, 500).index()
    frames = {name: pd.DataFrame({f"a/p-{i}": [float(i * k) for k in range(500)] for i in range(3)}, index=index)
              for name in ("fb_used_mib", "gpu_util")}
    s = Settings(prometheus=PrometheusSettings(url="http://p:9090"))
    disk = store.DiskCache(folder, s)
    assert disk.save(UsageCache(key="k", series=frames)) is None
    return frames, s, disk


def test_a_file_cut_in_the_middle_of_a_frame_is_one_warning_and_an_empty_cache(tmp_path: Path) -> None:
    frames, s, disk = _saved(tmp_path)
    data = disk.path.read_bytes()
    body = data[len(cachefile.MAGIC):].split(b"\n", 2)[2]
    size = int.from_bytes(body[:8], "big")
    (_, offset, length, _), _ = json.loads(body[8:8 + size])["usage"]["frames"]
    cut = len(data) - len(body) + 8 + size + offset + length // 2  # half-way through the first frame's values
    disk.path.write_bytes(data[:cut])
    again = store.DiskCache(tmp_path, s)
    cache, warning = again.load()
    assert cache is not None and cache.series == {} and not again.broken
    assert warning is not None and "\n" not in warning and str(disk.path) in warning and "truncated" in warning
    assert again.save(UsageCache(key="k", series=frames)) is None  # the next report's file replaces it
    assert store.loads(disk.path.read_bytes()).series.keys() == frames.keys()


def _garbled(data: bytes) -> bytes:
    """The file with its first frame's compressed values replaced by bytes of the same length that are no zstd
    frame, and its checksum made again: the header and every length still agree, only decoding fails."""
    import hashlib

    head_line, rest = data[len(cachefile.MAGIC):].split(b"\n", 1)
    body = rest.split(b"\n", 1)[1]
    size = int.from_bytes(body[:8], "big")
    (_, offset, length, _), *_ = json.loads(body[8:8 + size])["usage"]["frames"]
    at = 8 + size + offset
    body = body[:at] + b"\xab" * length + body[at + length:]
    return cachefile.MAGIC + head_line + b"\n" + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def test_frames_that_fail_to_decode_are_refused_when_read_not_misread(tmp_path: Path) -> None:
    """A report's cache decodes its frames while the queries run (``store.Frames``): the names are known at once,
    a frame that does not decode raises CacheFileError when it is read; ``loads`` refuses the file outright."""
    frames, s, disk = _saved(tmp_path)
    good, _ = store.DiskCache(tmp_path, s).load()
    assert good is not None and all(good.series[k].equals(frames[k]) for k in frames)
    disk.path.write_bytes(_garbled(disk.path.read_bytes()))
    with pytest.raises(store.CacheFileError, match="unreadable"):
        store.loads(disk.path.read_bytes())
    again = store.DiskCache(tmp_path, s)
    cache, warning = again.load()
    assert cache is not None and warning is None and sorted(cache.series) == sorted(frames) and len(cache.series) == 2
    with pytest.raises(store.CacheFileError, match="unreadable"):
        cache.series["gpu_util"]
    assert again.save(UsageCache(key="k", series=frames)) is None  # differs from the unreadable file: written
    assert store.loads(disk.path.read_bytes()).series.keys() == frames.keys()


def test_frames_that_fail_to_decode_are_one_warning_and_a_full_correct_read(cluster: Cluster, uncached: Report,
                                                                             tmp_path: Path) -> None:
    report(cluster, tmp_path, end_h=3)
    (cached,) = caches(tmp_path)
    cached.write_bytes(_garbled(cached.read_bytes()))
    res = CliRunner().invoke(main, ["report", "--prometheus-url", cluster.url, "--no-kubernetes", "--history", "2d",
                                    "--min-history", "12h", "--end", cluster.end.isoformat(), "-o", "json",
                                    "--cache-dir", str(tmp_path)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: cache")]
    assert len(warnings) == 1 and str(cached) in warnings[0] and "unreadable" in warnings[0], res.stderr
    # the new steps were read before the frames failed; then everything, as an uncached report reads it
    assert [int(n.replace(",", "")) for n in _POINTS.findall(res.stderr)][-1] == uncached.points
    assert json.loads(res.stdout) == uncached.doc
    healed = report(cluster, tmp_path)
    assert healed.incremental and not healed.warnings and healed.doc == uncached.doc


def test_settings_turn_the_cache_off_or_move_it(tmp_path: Path) -> None:
    s = Settings(prometheus=PrometheusSettings(url="http://p:9090", cache=False, cache_dir=str(tmp_path)))
    assert not s.prometheus.cache and s.prometheus.cache_dir == str(tmp_path)
    assert cachefile.file_for(tmp_path, s) != cachefile.file_for(tmp_path, s.model_copy(update={"namespaces": ("a",)}))


def test_a_changed_recording_rule_setting_does_not_reuse_the_cache(tmp_path: Path) -> None:
    """Reading recorded series instead of raw ones (or other recorded ones) is another query: a report after
    the change reads everything, never the steps the other reading left in the cache."""
    s = Settings(prometheus=PrometheusSettings(url="http://p:9090"))
    off = Settings(prometheus=PrometheusSettings(url="http://p:9090", recording_rules=False))
    mine = Settings(prometheus=PrometheusSettings(url="http://p:9090",
                                                  recorded_series={"fb_used_mib": "team:fb_used:5m"}))
    files = {cachefile.file_for(tmp_path, x) for x in (s, off, mine)}
    assert len(files) == 3


def _enospc(monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills while the cache file is written: the OS call itself fails (not our error type)."""
    import errno
    import os

    from recommender.core import writes

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writes.os, "fsync", full)


def test_a_full_disk_is_one_warning_leaves_no_partial_file_and_the_report_stands(
        cluster: Cluster, uncached: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _enospc(monkeypatch)
    res = report(cluster, tmp_path)
    assert len(res.warnings) == 1 and "No space left on device" in res.warnings[0]
    assert res.doc == uncached.doc and list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_a_spoilt_file_on_a_full_disk_is_still_one_warning_and_is_never_read(
        cluster: Cluster, uncached: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report(cluster, tmp_path, end_h=3)
    (cached,) = caches(tmp_path)
    spoilt = _truncate(cached.read_bytes())
    cached.write_bytes(spoilt)
    with monkeypatch.context() as patched:
        _enospc(patched)
        res = report(cluster, tmp_path)
    assert len(res.warnings) == 1 and str(cached) in res.warnings[0]
    assert not res.incremental and res.doc == uncached.doc
    assert caches(tmp_path) == [cached] and cached.read_bytes() == spoilt  # not replaced half-way
    again = report(cluster, tmp_path)  # still spoilt: refused again, then replaced
    assert len(again.warnings) == 1 and not again.incremental and again.doc == uncached.doc
    assert report(cluster, tmp_path).incremental


def test_a_cache_file_that_is_a_folder_is_one_warning_and_an_uncached_report(
        cluster: Cluster, uncached: Report, tmp_path: Path) -> None:
    report(cluster, tmp_path)
    (cached,) = caches(tmp_path)
    cached.unlink()
    cached.mkdir()
    res = report(cluster, tmp_path)
    assert len(res.warnings) == 1 and "cannot be read" in res.warnings[0]
    assert not res.incremental and res.doc == uncached.doc and cached.is_dir()


@pytest.mark.parametrize("mode", [0o500, 0o000, None], ids=["read-only", "unreadable", "a-file"])
def test_a_folder_the_report_may_not_use_is_one_warning_and_an_uncached_report(
        cluster: Cluster, uncached: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int | None) -> None:
    import errno
    import os
    import tempfile

    folder = tmp_path / "cache"
    if mode is None:
        folder.write_text("a file where the cache folder should be")
    else:
        report(cluster, folder)  # a whole cache file in it
        folder.chmod(mode)
    try:
        if mode is not None and os.access(folder, os.W_OK):  # root may anyway: the file system refuses (EROFS)
            def refused(*_: Any, **__: Any) -> Any:
                raise PermissionError(errno.EROFS, os.strerror(errno.EROFS))

            monkeypatch.setattr(os, "access", lambda *_a, **_k: False)
            monkeypatch.setattr(tempfile, "mkstemp", refused)
        res = report(cluster, folder)
    finally:
        if mode is not None:
            folder.chmod(0o700)
    assert len(res.warnings) == 1 and "cannot be used" in res.warnings[0]
    assert not res.incremental and res.doc == uncached.doc and res.points == uncached.points


def test_a_file_of_this_version_with_a_foreign_body_is_refused() -> None:
    """Another release that kept this format's number but changed the header or frames: refused, not misread."""
    import hashlib

    def forge(header: dict[str, Any], blobs: bytes = b"") -> bytes:
        head = json.dumps(header).encode()
        body = len(head).to_bytes(8, "big") + head + blobs
        return cachefile.MAGIC + f"{cachefile.FORMAT_VERSION}\n{hashlib.sha256(body).hexdigest()}\n".encode() + body

    good = json.loads(store.dumps(UsageCache(key="k"))[len(cachefile.MAGIC):].split(b"\n", 2)[2][8:])
    assert store.loads(forge(good)).key == "k"  # the forger writes what loads reads
    frames = {**good["usage"], "frames": [["m", 0, 64]]}
    two = pd.DataFrame({"x": [1.0, 2.0]}, index=Grid(0.0, 60.0, 2).index())
    body = store.dumps(UsageCache(key="k", series={"m": two}))[len(cachefile.MAGIC):].split(b"\n", 2)[2]
    size = int.from_bytes(body[:8], "big")
    head, blob = json.loads(body[8:8 + size]), body[8 + size:]
    assert store.loads(forge(head, blob)).series["m"]["x"].tolist() == [1.0, 2.0]
    (name, offset, length, axes), = head["usage"]["frames"]
    for wrong in ({**axes, "columns": ["x", "y"]}, {**axes, "index": axes["index"][:1]}, {**axes, "unit": "parsec"}):
        with pytest.raises(store.CacheFileError):
            store.loads(forge({**head, "usage": {**head["usage"], "frames": [[name, offset, length, wrong]]}}, blob))
    for bad in (forge({"version": 1}), forge({**good, "version": cachefile.FORMAT_VERSION + 1}),
                forge({**good, "usage": {"key": "k"}}),
                forge({**good, "usage": frames}), forge({**good, "usage": frames}, b"x" * 64), forge({}) + b"",
                forge({**good, "usage": {**good["usage"], "last_s": "soon"}})):
        with pytest.raises(store.CacheFileError):
            store.loads(bad)


def test_a_second_report_over_the_same_window_reuses_every_derived_result(
        cluster: Cluster, uncached: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline's memo beside the cache (tests/test_report_memo.py): the same window again computes no
    workload's features, class or forecasts, and gives the uncached report."""
    from recommender.pipeline import run

    report(cluster, tmp_path)
    (whole,) = tmp_path.glob("*.report")
    whole.unlink()  # the pipeline's memo, not the report memo (the test below)
    computed: list[str] = []
    real = run.workload_features
    monkeypatch.setattr(run, "workload_features", lambda *a, **kw: computed.append(a[1].ref.key) or real(*a, **kw))
    again = report(cluster, tmp_path)
    assert again.doc == uncached.doc and not again.warnings and computed == []
    assert report(cluster, tmp_path, end_h=1).doc != uncached.doc and computed  # another window: computed


def test_a_second_report_over_the_same_window_runs_no_pipeline(
        cluster: Cluster, uncached: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report memo beside the cache (tests/test_whole_report_memo.py): the same window again, its last steps read
    again from Prometheus, is the same input: the report is read back without the pipeline and is the uncached
    one; another window runs it."""
    from recommender.pipeline import run

    report(cluster, tmp_path)
    runs: list[int] = []
    real = run.run_cycle  # what the report runs (run_once is it too)
    monkeypatch.setattr(run, "run_cycle", lambda *a, **kw: runs.append(1) or real(*a, **kw))
    again = report(cluster, tmp_path)
    assert again.doc == uncached.doc and not again.warnings and runs == []
    assert report(cluster, tmp_path, end_h=1).doc != uncached.doc and runs == [1]


@pytest.mark.parametrize("spoil", [_truncate, _other_version, _flipped, lambda _: b"", lambda _: b"not a memo\n"],
                         ids=["truncated", "other-version", "altered", "empty", "foreign"])
def test_a_spoilt_memo_file_is_one_warning_and_a_correct_report(cluster: Cluster, uncached: Report, tmp_path: Path,
                                                                spoil: Any) -> None:
    from recommender.pipeline import memostore

    report(cluster, tmp_path)
    (memo,) = tmp_path.glob("*.memo")
    ours, theirs = (m.MAGIC + f"{m.FORMAT_VERSION}\n".encode() for m in (memostore, store))
    as_cache = memo.read_bytes().replace(ours, theirs, 1)  # the same spoilers as the cache's
    memo.write_bytes(spoil(as_cache).replace(theirs, ours, 1).replace(cachefile.MAGIC, memostore.MAGIC, 1))
    (whole,) = tmp_path.glob("*.report")
    whole.unlink()  # else the report memo answers the same window and the pipeline's memo is not read
    res = report(cluster, tmp_path)
    assert len(res.warnings) == 1 and str(memo) in res.warnings[0] and res.doc == uncached.doc
    healed = report(cluster, tmp_path)
    assert not healed.warnings and healed.doc == uncached.doc


def test_the_file_and_the_collections_key_are_made_from_one_reading(tmp_path: Path) -> None:
    """``file_for`` and the key ``_collect`` checks are both made from ``cachefile.reading``: a setting that shapes the
    queries (the TTFT objective misses are counted against, node labels) gives another file too."""
    from collectors.prometheus.cachefile import reading
    from recommender.core.settings_scaling import ScalingSettings

    s = Settings(prometheus=PrometheusSettings(url="http://p:9090/"))
    other = [s.model_copy(update={"scaling": ScalingSettings(ttft_objective_s=9.0)}),
             s.model_copy(update={"prometheus": s.prometheus.model_copy(update={"node_labels": ("zone",)})})]
    assert reading(s)[0] == "http://p:9090"  # as the client names it
    assert len({cachefile.file_for(tmp_path, x) for x in (s, *other)}) == 3


def test_a_frame_read_with_no_column_stays_so_the_next_read_is_incremental() -> None:
    """No replica counts for any workload is still something read: kept without columns, the next collection
    reads only new steps of it (before, it was dropped and every other report read it all again)."""
    from collectors.prometheus.cache import join_usage

    grid = Grid(0.0, 60.0, 4)
    empty = pd.DataFrame(index=grid.index(), dtype="float64")
    joined = join_usage({"replicas": empty}, {"replicas": empty.iloc[2:]}, grid, 120.0)
    assert list(joined) == ["replicas"] and joined["replicas"].columns.empty
    assert join_usage({"replicas": empty}, {}, grid, 120.0)["replicas"].index.equals(grid.index())
    cache = UsageCache()
    cache.keep(("k",), {"replicas": empty}, grid, None)
    assert cache.fresh_start(("k",), Grid(60.0, 60.0, 4)) is not None  # the window moved a step: incremental
    lost = pd.DataFrame({"a/p": [float("nan"), float("nan"), 3.0, 4.0]}, index=grid.index())
    assert join_usage({"fb": lost}, {}, grid, 120.0) == {}  # no value before the new steps, none read: gone


def _sums(rng: Any, pods: int, terms: int) -> tuple[list[float], list[float], list[list[float]]]:
    """Per pod: the sum of ``terms`` non-negative samples in one order, in another, and the samples."""
    import random

    scales = [10.0 ** rng.randint(-3, 9) for _ in range(pods)]  # one metric's unit per pod: percent .. bytes
    samples = [[rng.uniform(0.5, 100.0) * scale for _ in range(terms)] for scale in scales]
    once = [sum(t) for t in samples]
    shuffled = []
    for t in samples:
        other = list(t)
        random.Random(len(shuffled)).shuffle(other)
        shuffled.append(sum(other))
    return once, shuffled, samples


def test_a_re_read_step_summed_in_another_order_keeps_the_cached_bits() -> None:
    """Prometheus' ``sum by`` adds in no fixed order: the overlap steps re-read differ from the cached ones in
    the last bits. Those keep the cached values, so the pipeline memo's digests of the series match."""
    import random

    from collectors.prometheus.cache import join_usage

    rng = random.Random(7)
    pods = 200
    once, shuffled, _ = _sums(rng, pods, 1000)  # the reordering does move the last bits (below)
    assert sum(a != b for a, b in zip(once, shuffled, strict=True)) > pods // 4
    grid = Grid(0.0, 60.0, 4)
    cols = [f"ns/p{i}" for i in range(pods)]
    cached = pd.DataFrame([[1.0] * pods, [2.0] * pods, [3.0] * pods, once], index=grid.index(), columns=cols)
    fresh = pd.DataFrame([[3.0] * pods, shuffled], index=grid.index()[2:], columns=cols)
    joined = join_usage({"sm": cached}, {"sm": fresh}, grid, 120.0)["sm"]
    assert joined[cols].iloc[3].tolist() == once and joined[cols].iloc[:3].equals(cached.iloc[:3])


def test_a_real_change_of_one_sample_is_never_absorbed() -> None:
    """A sum in which one of its samples changed by that sample's smallest real step (one millionth of it, far
    below any metric's resolution) is new, whatever the order it was summed in; and so is a step filled in since
    (NaN or absent in the cache) and a value gone (NaN now)."""
    import random

    from collectors.prometheus.cache import same_as_cached

    rng = random.Random(11)
    for terms in (2, 10, 1000, 4000):
        once, _, samples = _sums(rng, 50, terms)
        changed = []
        for i, t in enumerate(samples):
            other = list(t)
            k = rng.randrange(len(other))
            other[k] += other[k] * 1e-6 * (1 if i % 2 else -1)
            random.Random(i).shuffle(other)
            changed.append(sum(other))
        cached = pd.DataFrame([once], columns=[f"p{i}" for i in range(50)])
        fresh = pd.DataFrame([changed], columns=cached.columns)
        kept = same_as_cached(cached, fresh)
        assert kept.iloc[0].tolist() == changed
    nan = float("nan")
    cached = pd.DataFrame({"a": [nan, 5.0], "b": [1.0, 2.0]})
    fresh = pd.DataFrame({"a": [4.0, nan], "b": [1.0, 2.0 * (1 + 1e-15)], "c": [7.0, 8.0]})
    kept = same_as_cached(cached, fresh)
    assert kept["a"].iloc[0] == 4.0 and pd.isna(kept["a"].iloc[1])  # filled in: new; gone: new
    assert kept["b"].tolist() == [1.0, 2.0] and kept["c"].tolist() == [7.0, 8.0]  # a pod not cached: as read


def test_a_frame_is_unchanged_exactly_when_its_values_are() -> None:
    """``store.same_values`` (whether a cache that collected nothing new is written again) says what
    ``np.array_equal(equal_nan=True)`` says: equal bits, and also -0.0 against 0.0 and NaNs of other payloads;
    any other difference, a NaN against a number, or another shape is a change."""
    import numpy as np

    rng = np.random.default_rng(3)
    a = rng.random((50, 7))
    a[a < 0.2] = np.nan
    assert store.same_values(a, a.copy())
    other_nan = a.copy()
    other_nan.view(np.int64)[np.isnan(a)] = np.float64("nan").view(np.int64) | 1  # another NaN payload
    assert np.isnan(other_nan).sum() == np.isnan(a).sum() and store.same_values(a, other_nan)
    zero = np.where(np.isnan(a), a, 0.0)
    assert store.same_values(zero, -zero)
    nudged = a.copy()
    nudged[3, 2] = np.nextafter(nudged[3, 2], 2.0) if np.isfinite(nudged[3, 2]) else 0.5
    assert not store.same_values(a, nudged)
    gone = np.where(np.isnan(a), 0.5, a)
    assert not store.same_values(a, gone) and not store.same_values(gone, a)
    assert not store.same_values(a, a[:-1]) and not store.same_values(a, a.reshape(7, 50))
    # the same memory: equal in the same layout only (overlapping or reversed views of it are compared)
    assert store.same_values(a, a) and store.same_values(a, a.view())
    assert not store.same_values(gone[1:], gone[:-1]) and not store.same_values(gone, gone[::-1])
    small = np.where(np.isnan(a), a, np.round(a * 64)).astype(np.float32)  # float32 frames: the same rules
    assert store.same_values(small, small.copy()) and store.same_values(small, small)
    bumped = small.copy()
    bumped[0, 0] = np.nextafter(bumped[0, 0], np.float32(99)) if np.isfinite(bumped[0, 0]) else np.float32(0.5)
    assert not store.same_values(small, bumped) and not store.same_values(small, small.astype(np.float64) + 1)


@pytest.mark.parametrize("seed", range(40))
def test_the_joined_frame_is_the_one_pandas_joins(seed: int) -> None:
    """``join_usage`` writes a float64 frame straight into one array (``_joined``); it is the frame pandas' boolean
    take, concat, reindex and column sort give (``_join_frames``), to the bit, with its index and column types:
    pods gone, new, all-NaN in the window, steps before the window, columns out of order, the window moved. Other
    inputs (float32, steps off the grid, fresh steps before the cut) are left to pandas."""
    import numpy as np

    from collectors.prometheus.cache import _join_frames, _joined, join_usage

    rng = np.random.default_rng(seed)
    n, step = int(rng.integers(3, 40)), 60.0
    shift = int(rng.integers(0, 4))  # the window moved this many steps since the cache was read
    old_grid, grid = Grid(0.0, step, n), Grid(shift * step, step, n)
    pods = [f"ns/p-{i:02d}" for i in range(int(rng.integers(1, 12)))]
    was = [p for p in pods if rng.random() < 0.8] or pods[:1]
    now = [p for p in pods if rng.random() < 0.8] or pods[-1:]
    rng.shuffle(was)
    old = pd.DataFrame(rng.random((n, len(was))), index=old_grid.index(), columns=pd.Index(was))
    old[old > 0.85] = np.nan
    if len(was) > 1:
        old.iloc[shift:, 0] = np.nan  # a pod with values only before the window
    first = max(old_grid.start_s + (n - 1 - int(rng.integers(1, 3))) * step, grid.start_s)
    cut = pd.Timestamp(first, unit="s", tz="UTC")
    fresh_index = grid.index()[grid.index() >= cut]
    new = pd.DataFrame(rng.random((len(fresh_index), len(now))), index=fresh_index, columns=pd.Index(now))
    fast = _joined(old, new, grid.index(), cut)
    assert fast is not None
    slow = _join_frames(old, new, grid.index(), cut)
    assert slow is not None
    pd.testing.assert_frame_equal(fast, slow, check_exact=True, check_freq=True, check_column_type=True)
    assert fast.columns.dtype == slow.columns.dtype and fast.index.dtype == slow.index.dtype
    assert np.array_equal(fast.to_numpy().view(np.int64), slow.to_numpy().view(np.int64))
    assert join_usage({"m": old}, {"m": new}, grid, first)["m"].equals(slow)
    # left to pandas, and still the same answer through join_usage
    off = new.set_axis(new.index + pd.Timedelta(seconds=1))
    early = pd.concat([old.iloc[[-1]].reindex(columns=now), new]) if shift == 0 and len(new) else None
    for other_old, other_new in ((old.astype(np.float32), new), (old, off), (old, new.astype(np.float32)),
                                 *(((old, early),) if early is not None and not early.index.duplicated().any()
                                   and early.index[0] < cut else ())):
        assert _joined(other_old, other_new, grid.index(), cut) is None
        slow_other = _join_frames(other_old, other_new, grid.index(), cut)
        assert slow_other is not None
        assert join_usage({"m": other_old}, {"m": other_new}, grid, first)["m"].equals(slow_other)


def test_frames_of_many_chunks_come_back_to_the_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame's values are zstd chunks of ``_ROWS`` values: read back bit for bit (NaN, -0.0, infinities, a
    float32 frame as float32) whether the chunks split columns or not; a header whose chunk sizes, rows per chunk
    or dtype do not fit the frame is refused, not misread."""
    import numpy as np

    monkeypatch.setattr(store, "_ROWS", 7)
    grid = Grid(0.0, 60.0, 9)
    rng = np.random.default_rng(1)
    values = rng.normal(size=(9, 4))
    values[0, 0], values[1, 1], values[2, 2], values[3, 3] = np.nan, -0.0, np.inf, -np.inf
    frame = pd.DataFrame(values, index=grid.index(), columns=pd.Index([f"a/p-{i}" for i in range(4)]))
    small = pd.DataFrame({"a/p-0": [1.5, 2.0], "a/p-1": [np.nan, 3.25]}, index=grid.index()[:2]).astype(np.float32)
    empty = pd.DataFrame(index=grid.index(), dtype="float64")
    data = store.dumps(UsageCache(key="k", series={"m": frame, "s": small, "e": empty}))
    back = store.loads(data).series
    assert np.array_equal(back["m"].to_numpy().view(np.int64), values.view(np.int64))
    pd.testing.assert_frame_equal(back["m"], frame, check_freq=False)
    pd.testing.assert_frame_equal(back["s"], small, check_freq=False)
    assert np.array_equal(back["s"].to_numpy().view(np.int32), small.to_numpy().view(np.int32))
    assert back["e"].shape == (9, 0)
    body = data[len(cachefile.MAGIC):].split(b"\n", 2)[2]
    size = int.from_bytes(body[:8], "big")
    head, blob = json.loads(body[8:8 + size]), body[8 + size:]
    (name, offset, length, axes), *others = head["usage"]["frames"]
    assert name == "m" and len(axes["chunks"]) == 6  # 36 values in chunks of 7
    import hashlib

    def forge(wrong: dict[str, Any]) -> bytes:
        h = {**head, "usage": {**head["usage"], "frames": [[name, offset, length, wrong], *others]}}
        text = json.dumps(h).encode()
        b = len(text).to_bytes(8, "big") + text + blob
        return cachefile.MAGIC + f"{cachefile.FORMAT_VERSION}\n{hashlib.sha256(b).hexdigest()}\n".encode() + b

    assert store.loads(forge(axes)).series["m"].equals(back["m"])  # the forger writes what loads reads
    sizes = axes["chunks"]
    for wrong in ({**axes, "rows": 8}, {**axes, "rows": 0}, {**axes, "chunks": sizes[:-1]},
                  {**axes, "chunks": [sizes[0] + 1, sizes[1] - 1, *sizes[2:]]}, {**axes, "chunks": [*sizes, 0]},
                  {**axes, "dtype": "float32"}, {**axes, "dtype": "int64"}):
        with pytest.raises(store.CacheFileError):
            store.loads(forge(wrong))


@pytest.mark.parametrize("seed", range(30))
def test_the_same_window_again_is_the_cached_frame_itself(seed: int) -> None:
    """The same window again, re-read steps bit for bit as cached: ``join_usage`` hands back the cached frame's
    array (no copy) on the grid's index, equal to what pandas joins; any difference in the re-read steps, a new
    pod, a cached pod with no value before the cut that was not read again, or a moved window is joined anew."""
    import numpy as np

    from collectors.prometheus.cache import _as_cached, _join_frames, join_usage

    rng = np.random.default_rng(100 + seed)
    n, step = int(rng.integers(3, 30)), 600.0
    grid = Grid(1_800_000_000.0, step, n)
    pods = sorted(f"ns/p-{i:02d}" for i in range(int(rng.integers(2, 9))))
    values = rng.random((n, len(pods)))
    values[values > 0.9] = np.nan
    values[0, :] = 0.5  # every pod has a value before the cut
    stored = grid.index().as_unit("us")
    old = pd.DataFrame(values, index=pd.DatetimeIndex(stored.asi8.view("datetime64[us]")).tz_localize("UTC"),
                       columns=pd.Index(pods))
    first = grid.start_s + (n - 2) * step
    cut = pd.Timestamp(first, unit="s", tz="UTC")
    read = [p for p in pods if rng.random() < 0.8 or p == pods[0]]
    new = old.loc[old.index >= cut, read].copy()
    new = new.loc[:, ~new.isna().all()] if rng.random() < 0.5 else new  # a pod's NaN steps not in the answer
    if new.columns.empty:
        new = old.loc[old.index >= cut, pods[:1]].copy()
        old.loc[old.index >= cut, pods[:1]] = 1.0
        new.loc[:, :] = 1.0
    missing = [p for p in pods if p not in new.columns]
    old.loc[old.index >= cut, missing] = np.nan  # what was not read again is NaN from the cut on
    same = _as_cached(old, new, grid.index(), cut)
    slow = _join_frames(old, new, grid.index(), cut)
    assert same is not None and slow is not None
    pd.testing.assert_frame_equal(same, slow, check_exact=True, check_freq=True)
    assert np.shares_memory(same.to_numpy(), old.to_numpy()) and same.index.freq == grid.index().freq
    assert join_usage({"m": old}, {"m": new}, grid, first)["m"].equals(slow)
    changed = new.copy()
    changed.iloc[-1, 0] = changed.iloc[-1, 0] + 0.125 if np.isfinite(changed.iloc[-1, 0]) else 0.25  # a real change
    extra = new.assign(**{"ns/zz": 1.0})
    last_bit = new.copy()
    last_bit.iloc[-1, 0] = np.nextafter(last_bit.iloc[-1, 0], 9.0) if np.isfinite(last_bit.iloc[-1, 0]) else 0.25
    assert _as_cached(old, last_bit, grid.index(), cut) is None  # (join_usage absorbs a last-bit reordering first)
    hollow = old.copy()
    hollow.loc[hollow.index < cut, pods[-1]] = np.nan
    moved = Grid(grid.start_s + step, step, n)
    for o, f, g in ((old, changed, grid), (old, extra, grid), (hollow, new.drop(columns=pods[-1], errors="ignore"),
                                                                 grid), (old, new, moved)):
        c = pd.Timestamp(max(first, g.start_s), unit="s", tz="UTC")
        assert _as_cached(o, f, g.index(), c) is None
        want = _join_frames(o, f, g.index(), c)
        assert want is not None and join_usage({"m": o}, {"m": f}, g, max(first, g.start_s))["m"].equals(want)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("kept", ["float64", "float32"])
def test_compact_fresh_steps_are_the_cached_frame(seed: int, kept: str) -> None:
    """A family read compact (float32 fresh steps, ``collect.COMPACT``) against its cached copy, float64 (a cache
    file of format 3) or float32: where the re-read steps are the cached bits in the cached dtype, ``join_usage``
    hands back the cached frame (no copy), equal to pandas' join in values and dtype; a fresh value the cached copy
    does not hold, no cached pod with a value before the cut (pandas' frame is then the fresh one alone, float32),
    or float64 fresh steps against a float32 copy (pandas widens the join) are joined by pandas as before."""
    import numpy as np

    from collectors.prometheus.cache import _as_cached, _join_frames, join_usage

    rng = np.random.default_rng(300 + seed)
    n, step = int(rng.integers(3, 30)), 600.0
    grid = Grid(1_800_000_000.0, step, n)
    pods = sorted(f"ns/p-{i:02d}" for i in range(int(rng.integers(1, 9))))
    values = rng.integers(0, 80_000, size=(n, len(pods))).astype(np.float64)  # whole MiB: exact in float32
    values[rng.random(values.shape) > 0.9] = np.nan
    values[0, :] = 1024.0
    old = pd.DataFrame(values, index=grid.index(), columns=pd.Index(pods)).astype(kept)
    first = grid.start_s + (n - 2) * step
    cut = pd.Timestamp(first, unit="s", tz="UTC")
    new = old.loc[old.index >= cut].astype(np.float32)
    same = _as_cached(old, new, grid.index(), cut)
    slow = _join_frames(old, new, grid.index(), cut)
    assert same is not None and slow is not None
    pd.testing.assert_frame_equal(same, slow, check_exact=True, check_freq=True)
    assert same.dtypes.eq(np.dtype(kept)).all() and np.shares_memory(same.to_numpy(), old.to_numpy())
    assert join_usage({"m": old}, {"m": new}, grid, first)["m"].equals(slow)
    inexact = old.astype(np.float64)  # a cached value float32 cannot hold: the fresh one widens to another
    inexact.iloc[-1, 0] = 1024.1
    hollow = old.copy()  # nothing before the cut: pandas keeps the fresh float32 frame
    hollow.loc[hollow.index < cut] = np.nan
    nudged = new.copy()  # a fresh value one float32 step off the cached one
    nudged.iloc[-1, 0] = np.nextafter(np.float32(nudged.iloc[-1, 0]), np.float32(9e9)) \
        if np.isfinite(nudged.iloc[-1, 0]) else np.float32(8.0)
    wider = kept == "float32"  # float64 fresh steps against a float32 copy: pandas widens the join
    for o, f, refused in ((inexact, new, True), (hollow, new, kept == "float64"), (old, nudged, True),
                          (old, new.astype(np.float64), wider)):
        fast = _as_cached(o, f, grid.index(), cut)
        want = _join_frames(o, f, grid.index(), cut)
        assert want is not None
        assert fast is None if refused else fast is None or (fast.equals(want) and fast.dtypes.equals(want.dtypes))
        got = join_usage({"m": o}, {"m": f}, grid, first)["m"]
        assert got.equals(want) and got.dtypes.equals(want.dtypes)
    assert _join_frames(hollow, new, grid.index(), cut).dtypes.eq(np.float32).all()  # why hollow is refused


def test_a_cache_another_version_of_the_collector_wrote_is_read_again_whole(cluster: Cluster, uncached: Report,
                                                                            tmp_path: Path) -> None:
    """A later version that forms a usage query another way, under the same settings (a fixed PromQL, say), reads
    every step again with its own queries: steps the old queries read are never joined to the new ones. Run as a
    copy of the collector with its query text changed (values the same: ``x * 1``), in a process of its own."""
    import os
    import shutil
    import subprocess
    import sys
    from types import SimpleNamespace

    import collectors

    cache = tmp_path / "cache"
    report(cluster, cache)
    assert report(cluster, cache).incremental
    newer = tmp_path / "newer"
    shutil.copytree(Path(collectors.__file__).parent, newer / "collectors",
                    ignore=shutil.ignore_patterns("__pycache__"))
    q = newer / "collectors" / "prometheus" / "queries.py"
    text = q.read_text()
    old = '    return scope.once(expr) if fam.agg == "sum" else expr\n'
    assert old in text
    q.write_text(text.replace(old, '    return f"({scope.once(expr) if fam.agg == \'sum\' else expr}) * 1"\n'))
    args = ["report", "--prometheus-url", cluster.url, "--no-kubernetes", "--history", "2d", "--min-history", "12h",
            "--end", cluster.end.isoformat(), "-o", "json", "--cache-dir", str(cache)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(newer), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", "from recommender.cli.main import main; main()", *args],
                         capture_output=True, text=True, env=env, cwd=newer, check=False, timeout=300)
    assert "collectors/prometheus/queries.py" not in run.stderr  # no traceback
    assert run.returncode == 0, run.stderr
    assert str(newer) in subprocess.run([sys.executable, "-c", "import collectors; print(collectors.__file__)"],
                                        capture_output=True, text=True, env=env, cwd=newer, check=True).stdout
    newer_report = Report(SimpleNamespace(exit_code=run.returncode, output=run.stderr, stdout=run.stdout,
                                          stderr=run.stderr))
    assert not newer_report.incremental and newer_report.points == uncached.points
    assert newer_report.doc == uncached.doc
    assert len(caches(cache)) == 1  # the file was replaced, not left beside a new one


def test_the_code_version_follows_every_source_that_reads_usage_and_nothing_else(tmp_path: Path) -> None:
    import shutil

    import collectors

    repo = Path(collectors.__file__).resolve().parents[1]
    for part in ("collectors", "recommender/core"):
        shutil.copytree(repo / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    version = cachefile.code_version.__wrapped__
    base = version(tmp_path)
    assert version(tmp_path) == base == cachefile.code_version()  # the copy is the installed code
    (tmp_path / "recommender/core/plan.py").write_text("# not what usage is read with\n")
    (tmp_path / "collectors/prometheus/__pycache__").mkdir()
    (tmp_path / "collectors/prometheus/__pycache__/x.pyc").write_bytes(b"compiled")
    assert version(tmp_path) == base
    for edited in ("collectors/prometheus/parse.py", "collectors/pods.py", "recommender/core/usage.py"):
        f = tmp_path / edited
        text = f.read_text()
        f.write_text(text + "\n")
        assert version(tmp_path) != base, edited
        f.write_text(text)
    (tmp_path / "collectors/prometheus/new.py").write_text("")
    assert version(tmp_path) != base
