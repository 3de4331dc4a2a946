"""``report -o`` is the format, kubectl's way (issue 39: ``-o json`` wrote the table into a file named ``json``);
files go to ``--output-file``; several formats come from one plan; the old flags still work, with a note."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

import recommender.cli.app
import recommender.pipeline.run
from recommender.cli.main import main
from recommender.cli.output import NOT_A_FORMAT, format_paths


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def report(*args: str) -> Result:
    return CliRunner().invoke(main, ["report", "--demo", "--no-forecast", *args])


def test_o_json_prints_json_and_writes_no_file(cwd: Path) -> None:
    run = report("-o", "json")
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["schema_version"]
    assert os.listdir(cwd) == []


@pytest.mark.parametrize("value", ["report.json", "out", "json,report.html", "json,"])
def test_o_with_a_file_is_one_line_and_writes_nothing(value: str, cwd: Path) -> None:
    run = report("-o", value)
    assert run.exit_code == 2
    assert run.stderr.strip().splitlines() == [f"error: {NOT_A_FORMAT}"]
    assert os.listdir(cwd) == []


def test_o_yaml_is_the_json_document(cwd: Path) -> None:
    assert yaml.safe_load(report("-o", "yaml").stdout) == json.loads(report("-o", "json").stdout)


def test_f_still_works_with_a_note(cwd: Path) -> None:
    run = report("-f", "json")
    assert run.exit_code == 0
    assert json.loads(run.stdout) == json.loads(report("-o", "json").stdout)
    assert "-f/--format is deprecated" in run.stderr and "-o FORMAT" in run.stderr


def test_old_f_and_o_file_fails_before_writing(cwd: Path) -> None:
    run = report("-f", "csv", "-o", "gpu.csv")
    assert run.exit_code == 2 and NOT_A_FORMAT in run.stderr
    assert os.listdir(cwd) == []


def test_several_formats_come_from_one_plan(cwd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def counted(module: Any, name: str) -> None:
        real = getattr(module, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)

    counted(recommender.cli.app, "collect")
    counted(recommender.pipeline.run, "run_cycle")  # imported by the report where it runs the pipeline
    run = report("-o", "json,html,csv", "--output-file", "r")
    assert run.exit_code == 0, run.output
    assert calls == ["collect", "run_cycle"]  # one read of the source, one plan, three formats
    assert sorted(os.listdir(cwd)) == ["r.csv", "r.device-plugin.yaml", "r.html", "r.json", "r.mig-nodes.csv",
                                       "r.mig-parted.yaml"]
    assert json.loads((cwd / "r.json").read_text())["workloads"]
    assert (cwd / "r.html").read_text().lstrip().lower().startswith("<!doctype html")


def test_several_formats_to_stdout_is_an_error(cwd: Path) -> None:
    run = report("-o", "json,yaml")
    assert run.exit_code == 2 and "--output-file" in run.stderr


def test_format_paths() -> None:
    assert format_paths("out/r.json", ("json",)) == {"json": Path("out/r.json")}
    assert format_paths("r.json", ("json", "markdown")) == {"json": Path("r.json"), "markdown": Path("r.md")}
    assert format_paths("r", ("table", "wide")) == {"table": Path("r.txt"), "wide": Path("r.wide.txt")}


def test_snapshot_output_dir_and_its_deprecated_o(cwd: Path) -> None:
    new = CliRunner().invoke(main, ["snapshot", "--demo", "--output-dir", "a"])
    old = CliRunner().invoke(main, ["snapshot", "--demo", "-o", "b"])
    assert new.exit_code == old.exit_code == 0
    assert sorted(os.listdir(cwd / "a")) == sorted(os.listdir(cwd / "b"))
    assert "deprecated" in old.stderr and "deprecated" not in new.stderr
    refused = CliRunner().invoke(main, ["snapshot", "--demo", "-o", "json"])
    assert refused.exit_code == 2 and not (cwd / "json").exists()
    assert CliRunner().invoke(main, ["snapshot", "--demo"]).exit_code == 2


def test_forecast_output_file_and_its_deprecated_o(cwd: Path) -> None:
    series = "series_id,timestamp,value\n" + "".join(f"s,{600 * i},{i % 7}\n" for i in range(300))
    (cwd / "in.csv").write_text(series)
    new = CliRunner().invoke(main, ["forecast", "in.csv", "--horizon", "3", "--output-file", "a.csv"])
    old = CliRunner().invoke(main, ["forecast", "in.csv", "--horizon", "3", "-o", "b.csv"])
    assert new.exit_code == old.exit_code == 0, new.output
    assert (cwd / "a.csv").read_text() == (cwd / "b.csv").read_text()
    assert "deprecated" in old.stderr


@pytest.mark.parametrize("command", ["report", "snapshot"])
def test_running_out_of_memory_is_one_line_and_leaves_no_file(command: str, cwd: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def no_memory(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(recommender.cli.app, "make_reports", no_memory)
    monkeypatch.setattr(recommender.cli.app, "save_snapshot", no_memory)
    where = ["--output-file", "r.json", "-o", "json"] if command == "report" else ["--output-dir", "snap"]
    run = CliRunner().invoke(main, [command, "--demo", *where])
    assert run.exit_code == 2, run.output
    assert run.stderr.startswith("error: ran out of memory") and run.stderr.count("\n") == 1
    assert "Traceback" not in run.output and os.listdir(cwd) == []
