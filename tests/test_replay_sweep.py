"""The replay sweep: populations and halves of the fixed split, each population's half as one fleet, and a
results file that a stopped sweep resumes from and that can be summarised without replaying."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import replay_sweep
from replay_fleet import ClientResult, Figures, fleet, fleet_table, fleets
from replay_split import REPORT, TUNE, Client, half_of


def client(name: str, half: str, figures: dict[str, tuple[float, float, int]], goal: bool = False,
           population: str = "p/q") -> ClientResult:
    return ClientResult(population, name, half, {k: Figures(*v) for k, v in figures.items()}, 0.0, goal)


SMALL = client("chunk-1", TUNE, {"static-peak": (100.0, 0.0, 1000), "reactive": (60.0, 10.0, 1000),
                                 "ours": (30.0, 2.0, 1000)}, goal=True)
LARGE = client("chunk-2", TUNE, {"static-peak": (300.0, 0.0, 9000), "reactive": (140.0, 1.0, 9000),
                                 "ours": (90.0, 0.5, 9000)})


def test_a_fleet_sums_gpu_hours_weights_misses_by_requests_and_names_its_worst_client() -> None:
    f = fleet("p/q", TUNE, [SMALL, LARGE])
    assert f.gpu_hours == {"static-peak": 400.0, "reactive": 200.0, "ours": 120.0}
    assert f.over_pct["reactive"] == pytest.approx(1.9)  # (10% of 1,000 + 1% of 9,000) / 10,000, not the mean 5.5%
    assert f.over_pct["ours"] == pytest.approx(0.65)
    assert f.worst["ours"] == ("chunk-1", 2.0) and f.worst["reactive"] == ("chunk-1", 10.0)
    assert f.vs("ours", "static-peak") == pytest.approx(-0.7) and f.vs("ours", "reactive") == pytest.approx(-0.4)
    assert f.vs("ours", "reactive-rightsized") is None and (f.clients, f.goal_met) == (2, 1)
    assert f.above_worst == {"static-peak": 0, "reactive": 1, "ours": 0}  # over 3%: reactive's 10% only
    partial = client("chunk-3", TUNE, {"ours": (5.0, 0.0, 10)})  # ran ours alone: only ours is summed
    assert list(fleet("p/q", TUNE, [SMALL, partial]).gpu_hours) == ["ours"]


@pytest.mark.parametrize(("a", "b", "met"), [
    ((50.0, 3.0, 100), (50.0, 0.0, 200), True),  # half of static peak, 1.00% of all requests, worst 3%: met
    ((51.0, 3.0, 100), (50.0, 0.0, 200), False),  # over half of static peak's GPU-hours
    ((50.0, 3.0, 100), (50.0, 0.1, 200), False),  # 1.07% of the fleet's requests
    ((50.0, 3.5, 100), (50.0, 0.0, 400), False),  # the fleet at 0.70%, but one client over 3%
])
def test_the_fleet_goal_needs_all_three_parts(a: tuple[float, float, int], b: tuple[float, float, int],
                                              met: bool) -> None:
    clients = [client(name, REPORT, {"static-peak": (100.0, 0.0, ours[2]), "ours": ours})
               for name, ours in (("chunk-1", a), ("chunk-2", b))]
    assert fleet("p/q", REPORT, clients).goal() is met
    assert fleet("p/q", REPORT, [client("c", REPORT, {"ours": (1.0, 0.0, 1)})]).goal() is None  # no static peak


def test_fleets_group_by_population_and_half_tune_first_and_the_table_has_a_row_each() -> None:
    results = [client("chunk-5", REPORT, {"static-peak": (10.0, 0.0, 10), "ours": (4.0, 0.2, 10)}, population="a/b"),
               client("chunk-1", TUNE, {"static-peak": (10.0, 0.0, 10), "ours": (6.0, 0.4, 10)}, population="a/b"),
               client("conv", REPORT, {"static-peak": (2.0, 0.0, 5), "ours": (1.0, 3.0, 5)}, population="azure/conv")]
    got = fleets(results)
    assert [(f.population, f.half, f.clients) for f in got] == [("a/b", TUNE, 1), ("a/b", REPORT, 1),
                                                                ("azure/conv", REPORT, 1)]
    rows = fleet_table(got, ["static-peak", "reactive", "ours"])
    assert len(rows) == 2 + 3 and rows[0].startswith("| population, half (clients) | static-peak | reactive | ours |")
    assert rows[2].startswith("| a/b, tune (1) | 10.0 / 0.00 | not run | 6.00 / 0.40 | −40% / – / – | chunk-1: 0.40 |")
    assert rows[3].endswith("| met |") and rows[4].endswith("| not met |")  # 3% over on the one-hour trace


def servegen_data(root: Path) -> tuple[Path, list[str], list[str]]:
    """A data folder with one small population: two clients in each half (10-minute windows, 0.5 and 0.2/s)."""
    folder = root / "alibaba-servegen" / "data" / "lang" / "m"
    folder.mkdir(parents=True)
    tune = [n for n in range(40) if half_of("lang/m", n) == TUNE][:2]
    report = [n for n in range(40) if half_of("lang/m", n) == REPORT][:2]
    for n, rate in zip(tune + report, ("0.5", "0.2", "0.5", "0.2"), strict=True):
        (folder / f"chunk-{n}-trace.csv").write_text(f"0,{rate},1.0,Gamma,1.0,2.0\n600,{rate},1.0,,0,0\n")
    return root, [f"chunk-{n}" for n in tune], [f"chunk-{n}" for n in report]


def test_the_sweep_runs_a_half_records_each_client_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    data, tune, report = servegen_data(tmp_path / "data")
    out = tmp_path / "sweep.jsonl"
    argv = ["--data", str(data), "--population", "lang/m", "--half", REPORT, "--out", str(out),
            "--policies", "static-peak,reactive", "--jobs", "2"]
    assert replay_sweep.main(argv) == 0
    first = capsys.readouterr().out.splitlines()
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["client"] for r in records) == sorted(report)  # the report half only
    assert all(r["half"] == REPORT and set(r["policies"]) == {"static-peak", "reactive"} for r in records)
    assert all(r["static_peak_replicas"] >= 1 and r["code"] == replay_sweep.code_version() for r in records)
    lines = [x for x in first if x.startswith("client=")]
    assert [x.split()[1] for x in lines] == report  # in the population's order
    assert all(x.index(" static-peak=") < x.index(" reactive=") for x in lines)  # the policies in the order run
    assert not any(x.startswith("# ours met") or ": ours over" in x for x in first)  # ours did not run: no counts
    table = [x for x in first if x.startswith("| lang/m")]
    assert table and table[0].startswith(f"| lang/m, report ({len(report)}) |")

    def no_replay(c: Client, extra: list[str]) -> dict[str, Any]:
        raise AssertionError(f"{c.name} replayed again")

    monkeypatch.setattr(replay_sweep, "replay_client", no_replay)
    with out.open("a") as f:
        f.write('{"population": "lang/m", "client"')  # a sweep stopped mid-line
    assert replay_sweep.main(argv) == 0  # the same code and arguments: nothing replayed, the same table
    again = capsys.readouterr()
    assert [x for x in again.out.splitlines() if x.startswith("| lang/m")] == table
    assert "replaying 0" in again.err
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(records[0] | {"population": "lang/n"}) + "\n")
    assert replay_sweep.main(["--summarise", str(out), str(other), "--policies", "static-peak,reactive"]) == 0
    summarised = capsys.readouterr()
    assert [x for x in summarised.out.splitlines() if x.startswith("| lang/m")] == table
    assert any(x.startswith("| lang/n, report (1) |") for x in summarised.out.splitlines())
    assert "not a whole record: left out" in summarised.err

    ran: list[str] = []

    def fake(c: Client, extra: list[str]) -> dict[str, Any]:
        ran.append(c.name)
        return {"wall_s": 0.0, "error": "stub"}

    monkeypatch.setattr(replay_sweep, "replay_client", fake)
    assert replay_sweep.main([*argv, "--seed", "1"]) == 0  # other replay arguments: every client again
    assert sorted(ran) == sorted(report)
    assert "error: stub" in capsys.readouterr().out
    ran.clear()
    assert replay_sweep.main([*argv[:5], "both", *argv[6:], "--seed", "1"]) == 0  # failed ones are run again
    assert sorted(ran) == sorted(tune + report)


def test_the_sweep_says_what_it_cannot_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _, _ = servegen_data(tmp_path / "data")
    assert replay_sweep.main(["--data", str(data), "--population", "lang/x"]) == 2
    assert capsys.readouterr().err.startswith("error: no population 'lang/x'")
    assert replay_sweep.main(["--data", str(data), "--population", "lang/m", "--clients", "999"]) == 2
    assert "no client chunk-999" in capsys.readouterr().err
    assert replay_sweep.main(["--summarise", str(tmp_path / "absent.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        replay_sweep.main(["--data", str(data)])  # neither a population, --all nor --summarise
    assert replay_sweep.main(["--data", str(tmp_path / "absent"), "--all"]) == 0
    assert "skipped" in capsys.readouterr().out
    bad = tmp_path / "chunk-9-trace.csv"
    bad.write_text("not,a\n")
    failed = replay_sweep.replay_client(Client("lang/m", "chunk-9", REPORT, bad, "azure"), [])
    assert failed["error"].startswith("exit 2: error: ") and "is not a azure trace" in failed["error"]


def test_clients_over_the_request_limit_are_left_out_named_and_counted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    data, tune, report = servegen_data(tmp_path / "data")  # 0.5/s clients: 600 requests; 0.2/s: 240
    big = [tune[0], report[0]]
    assert [replay_sweep.expected_requests(Client("lang/m", n, TUNE, data / "alibaba-servegen" / "data" / "lang" /
                                                  "m" / f"{n}-trace.csv", "servegen")) for n in (*big, tune[1])] \
        == [600, 600, 240]
    ran: list[str] = []

    def fake(c: Client, extra: list[str]) -> dict[str, Any]:
        ran.append(c.name)
        return {"wall_s": 0.0, "error": "stub"}

    monkeypatch.setattr(replay_sweep, "replay_client", fake)
    out = tmp_path / "sweep.jsonl"
    argv = ["--data", str(data), "--population", "lang/m", "--out", str(out), "--max-requests", "300"]
    assert replay_sweep.main(argv) == 0
    printed = capsys.readouterr()
    assert sorted(ran) == sorted([tune[1], report[1]])
    assert sum("skipped: about 0 M requests, over --max-requests 300" in x for x in printed.out.splitlines()) == 2
    count = next(x for x in printed.out.splitlines() if " clients replayed, " in x)
    assert "2 failed, 2 left out as too large" in count and all(f"lang/m {n}" in count for n in big)
    ran.clear()
    assert replay_sweep.main([*argv[:-1], "1000"]) == 0  # a higher limit: the clients left out are replayed
    assert sorted(ran) == sorted(tune + report)
    assert "0 left out" in capsys.readouterr().out


def test_each_replay_runs_one_thread_unless_the_user_set_the_thread_counts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, str]] = []

    def fake_run(*_: Any, env: dict[str, str], **__: Any) -> Any:
        seen.append(env)
        return replay_sweep.subprocess.CompletedProcess([], 1, "", "no replay here")

    monkeypatch.setattr(replay_sweep.subprocess, "run", fake_run)
    for var in replay_sweep.THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("RIGHTSIZER_SWEEP_MARK", "kept")
    record = replay_sweep.replay_client(Client("p/q", "chunk-1", REPORT, tmp_path / "t.csv", "servegen"), [])
    assert record["error"] == "exit 1: no replay here"
    (env,) = seen
    assert env["OMP_NUM_THREADS"] == "3" and env["RIGHTSIZER_SWEEP_MARK"] == "kept"  # the user's, untouched
    assert all(env[v] == "1" for v in replay_sweep.THREAD_VARS if v != "OMP_NUM_THREADS")
