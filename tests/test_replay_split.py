"""The fixed TUNE/REPORT split of the replay's clients (issue 43): the sha256 rule, every client of every
population in exactly one half, both halves of each ServeGen population non-empty."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import replay_split
from replay_split import REPORT, TUNE, all_clients, half_of, servegen_clients

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def fake_data(root: Path, populations: dict[str, int]) -> Path:
    for population, n in populations.items():
        folder = root / "alibaba-servegen" / "data" / population
        folder.mkdir(parents=True)
        for chunk in range(n):
            (folder / f"chunk-{chunk}-trace.csv").write_text("0,0.1,1.0,,0,0\n")
            (folder / f"chunk-{chunk}-dataset.json").write_text("{}")  # not a client
    return root


def test_each_client_falls_in_one_half_by_its_population_and_number(tmp_path: Path) -> None:
    data = fake_data(tmp_path, {"language/m-mid": 12, "reason/deepseek-r1": 12})
    clients = servegen_clients(data / "alibaba-servegen" / "data")
    assert len(clients) == 24 and {c.half for c in clients} == {TUNE, REPORT}
    assert len({(c.population, c.name) for c in clients}) == 24  # each once, in one half
    assert [c.name for c in clients[:3]] == ["chunk-0", "chunk-1", "chunk-2"]  # by number, not as text sorts
    for c in clients:
        assert c.half == half_of(c.population, int(c.name.removeprefix("chunk-")))
        assert c.path.is_file() and c.format == "servegen"
    # the same chunk number may fall differently in another population: the population is part of the key
    assert any(half_of("language/m-mid", n) != half_of("reason/deepseek-r1", n) for n in range(12))


def test_the_split_does_not_move_when_the_folder_changes(tmp_path: Path) -> None:
    """Adding clients or a population leaves every earlier client in its half: the split is per file name."""
    small = servegen_clients(fake_data(tmp_path / "a", {"language/m-mid": 10}) / "alibaba-servegen" / "data")
    large = servegen_clients(fake_data(tmp_path / "b", {"language/m-mid": 40, "x/y": 5}) / "alibaba-servegen" / "data")
    halves = {c.name: c.half for c in large if c.population == "language/m-mid"}
    assert all(halves[c.name] == c.half for c in small)


@pytest.mark.skipif(not (SHARED / "alibaba-servegen" / "data").is_dir(), reason="../shared/data absent")
def test_the_shared_populations_split_as_issue_43_fixed_them() -> None:
    clients = all_clients(SHARED)
    counts: dict[str, dict[str, int]] = {}
    for c in clients:
        counts.setdefault(c.population, {TUNE: 0, REPORT: 0})[c.half] += 1
    assert counts["language/m-mid"] == {TUNE: 58, REPORT: 51}
    assert counts["language/m-small"] == {TUNE: 20, REPORT: 23}
    assert counts["multimodal/mm-image"] == {TUNE: 17, REPORT: 18}
    assert counts["reason/deepseek-r1"] == {TUNE: 38, REPORT: 35}
    servegen = [c for c in clients if c.format == "servegen"]
    for population in {c.population for c in servegen}:
        assert min(counts[population].values()) > 0, population
    assert all(c.half == REPORT for c in clients if c.format != "servegen")  # Azure and Mooncake report only


def test_cli_lists_each_half_and_says_what_it_cannot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = fake_data(tmp_path, {"language/m-mid": 6, "multimodal/mm-image": 4})
    assert replay_split.main(["--data", str(data)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [x.split(" ")[:2] for x in lines] == [["language/m-mid", TUNE], ["language/m-mid", REPORT],
                                                  ["multimodal/mm-image", TUNE], ["multimodal/mm-image", REPORT]]
    tune = lines[0].split(": ")[1].split(",")
    assert tune == [str(n) for n in range(6) if half_of("language/m-mid", n) == TUNE]
    assert replay_split.main(["--data", str(data), "--population", "multimodal/mm-image", "--half", REPORT,
                              "--names"]) == 0
    named = capsys.readouterr().out.splitlines()
    assert named and all(x.startswith("multimodal/mm-image chunk-") and f" {REPORT} " in x for x in named)
    assert replay_split.main(["--data", str(data), "--population", "language/nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no population 'language/nope'") and len(err.splitlines()) == 1
    assert replay_split.main(["--data", str(tmp_path / "absent")]) == 0
    assert "nothing to list" in capsys.readouterr().out
