"""Files written whole or not at all, destinations checked before the run, credentials never echoed.

The full-disk cases run the CLI in a child process whose file-size limit (RLIMIT_FSIZE) is smaller than
the report: its writes fail with EFBIG as on a full disk (SIGXFSZ ignored, as a shell's ``ulimit -f``
leaves it to the program)."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from collectors.files import read_snapshot
from recommender.cli.main import MAX_HORIZON_STEPS, main
from recommender.core.settings import PrometheusSettings
from recommender.core.writes import OutputError, replace_dir, write_file

ROOT = Path(__file__).resolve().parent.parent
LIMIT_BYTES = 4096


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def cli_with_a_full_disk(*args: str) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, LIMIT_BYTES))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "MPLCONFIGDIR": "/tmp"}
    return subprocess.run([sys.executable, "-c", "from recommender.cli.main import main; main()", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300, preexec_fn=limit, check=False)


def one_error_line(output: str) -> str:
    lines = [x for x in output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert "Traceback" not in output
    return lines[0]


def test_report_into_a_bad_destination_is_one_line_before_the_run(tmp_path: Path) -> None:
    out = cli("report", "--demo", "-o", "json", "--output-file", str(tmp_path / "missing" / "report.json"))
    assert out.exit_code == 2 and "the folder" in one_error_line(out.output) and "does not exist" in out.output
    folder = cli("report", "--demo", "-o", "json", "--output-file", str(tmp_path))  # click's own check: a usage error
    assert folder.exit_code == 2 and "is a directory" in folder.output and "Traceback" not in folder.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only file: nothing to refuse")
def test_report_onto_a_read_only_file_is_one_line(tmp_path: Path) -> None:
    dest = tmp_path / "report.json"
    dest.write_text("previous", encoding="utf-8")
    dest.chmod(0o444)
    out = cli("report", "--demo", "-o", "json", "--output-file", str(dest))
    assert out.exit_code == 2 and "read-only" in one_error_line(out.output)
    assert dest.read_text(encoding="utf-8") == "previous"


def test_a_full_disk_leaves_the_previous_report_whole(tmp_path: Path) -> None:
    dest = tmp_path / "report.json"
    dest.write_text('{"previous": true}\n', encoding="utf-8")
    done = cli_with_a_full_disk("report", "--demo", "-o", "json", "--output-file", str(dest))
    assert done.returncode == 2, done.stderr
    assert "cannot write" in one_error_line(done.stderr.splitlines()[-1])
    assert json.loads(dest.read_text(encoding="utf-8")) == {"previous": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary file left behind


def test_a_full_disk_leaves_the_previous_snapshot_loadable(tmp_path: Path) -> None:
    dest = tmp_path / "snap"
    assert cli("snapshot", "--demo", "--output-dir", str(dest)).exit_code == 0
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    done = cli_with_a_full_disk("snapshot", "--demo", "--output-dir", str(dest))
    assert done.returncode == 2 and "cannot write" in done.stderr.splitlines()[-1], done.stderr
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert read_snapshot(dest).workloads  # still a snapshot
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap"]


def test_a_snapshot_replaces_the_previous_one_whole(tmp_path: Path) -> None:
    dest = tmp_path / "snap"
    dest.mkdir()
    (dest / "stale.txt").write_text("from before", encoding="utf-8")
    assert cli("snapshot", "--demo", "--output-dir", str(dest)).exit_code == 0
    assert sorted(p.name for p in dest.iterdir()) == ["snapshot.json", "usage.parquet"]


def test_forecast_checks_its_output_and_bounds_its_horizon(tmp_path: Path) -> None:
    series = tmp_path / "s.csv"
    series.write_text("series_id,timestamp,value\n" + "".join(f"a,{600 * i},{i % 7}\n" for i in range(300)),
                      encoding="utf-8")
    out = cli("forecast", str(series), "--horizon", "12", "--output-file", str(tmp_path / "missing" / "x.csv"))
    assert out.exit_code == 2 and "does not exist" in one_error_line(out.output)
    big = cli("forecast", str(series), "--horizon", "50000000")
    assert big.exit_code == 2 and f"1<=x<={MAX_HORIZON_STEPS}" in big.output
    ok = cli("forecast", str(series), "--horizon", "12", "--output-file", str(tmp_path / "f.csv"))
    assert ok.exit_code == 0 and (tmp_path / "f.csv").read_text(encoding="utf-8").startswith("series_id,")


def test_a_failed_fill_leaves_the_previous_folder_and_no_temporaries(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "keep").write_text("old", encoding="utf-8")

    def fill(folder: Path) -> None:
        (folder / "half").write_text("new", encoding="utf-8")
        raise OSError(28, "No space left on device", str(folder / "half"))

    with pytest.raises(OutputError, match="No space left on device"):
        replace_dir(dest, fill)
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and (dest / "keep").read_text(encoding="utf-8") == "old"


def test_a_new_file_gets_the_usual_mode_and_a_replaced_one_keeps_its_own(tmp_path: Path) -> None:
    new, old = tmp_path / "new.txt", tmp_path / "old.txt"
    old.write_text("x", encoding="utf-8")
    old.chmod(0o640)
    write_file(new, "a")
    write_file(old, "b")
    mask = os.umask(0)
    os.umask(mask)
    assert new.stat().st_mode & 0o777 == 0o666 & ~mask  # mkstemp's own 0600 would hide a report from others
    assert old.stat().st_mode & 0o777 == 0o640 and old.read_text(encoding="utf-8") == "b"


# --- credentials -------------------------------------------------------------------------------------

PASSWORD = "s3cr3t-planted-p4ss"


def test_credentials_in_the_url_move_to_basic_auth_and_leave_the_url() -> None:
    p = PrometheusSettings(url=f"https://alice:{PASSWORD}@prom.example:9090/prom")
    assert (p.url, p.username, p.password) == ("https://prom.example:9090/prom", "alice", PASSWORD)
    assert PASSWORD not in repr(p)
    given = PrometheusSettings(url=f"http://bob:{PASSWORD}@h", username="carol", password="x")
    assert (given.url, given.username, given.password) == ("http://h", "carol", "x")  # what is given wins


def test_a_password_in_the_url_is_never_echoed_by_an_error() -> None:
    with socket.socket() as s:  # a free port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = cli("report", "--prometheus-url", f"http://alice:{PASSWORD}@127.0.0.1:{port}", "--no-kubernetes")
    assert out.exit_code == 2 and PASSWORD not in out.output and "127.0.0.1" in out.output


@pytest.mark.prometheus
def test_a_password_in_the_url_appears_in_no_output(cluster: Any, tmp_path: Path) -> None:
    url = cluster.url.replace("http://", f"http://alice:{PASSWORD}@")
    common = ["--prometheus-url", url, "--no-kubernetes", "--history", "2d", "--min-history", "12h",
              "--end", cluster.end.isoformat()]
    for fmt in ("json", "yaml", "html", "markdown", "csv", "table"):
        out = cli("report", *common, "-o", fmt, "--output-file", str(tmp_path / f"r.{fmt}"))
        assert out.exit_code == 0, out.output
        assert PASSWORD not in out.output and PASSWORD not in (tmp_path / f"r.{fmt}").read_text(encoding="utf-8")
    assert cli("snapshot", *common, "--output-dir", str(tmp_path / "snap")).exit_code == 0
    for f in (tmp_path / "snap").iterdir():
        assert PASSWORD.encode() not in f.read_bytes(), f
