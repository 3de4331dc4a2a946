"""The scale benchmark's goal lines (``benchmarks/scale.py``): the warm report's goal read from the medians of
several cold and warm pairs, so that one slow or fast cold report does not decide it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import scale


def test_the_warm_goal_reads_the_medians_of_the_pairs_not_one_pair(capsys: pytest.CaptureFixture[str]) -> None:
    walls = [(44.8, 1.8), (36.0, 2.0), (40.0, 1.9)]  # the first pair alone would read 24.9x, the second 18.0x
    assert scale.warm_ratio(walls) == pytest.approx(40.0 / 1.9)
    scale.goals(2000, 14, {"wall_s": 44.8, "peak_rss_mib": 300.0}, {"wall_s": 1.8}, 2, walls)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("goal warm"))
    assert f"{40.0 / 1.9:.2f} >= 20? met (medians of 3 pairs)" in line


def test_one_pair_reads_its_own_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    scale.goals(2000, 14, {"wall_s": 36.0, "peak_rss_mib": 300.0}, {"wall_s": 2.0}, 2, [(36.0, 2.0)])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("goal warm"))
    assert "18.00 >= 20? NOT met" in line and "medians" not in line
