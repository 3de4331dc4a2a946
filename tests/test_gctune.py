"""A report runs with fewer garbage collections (recommender.cli.gctune): what was alive is frozen and young
collections are far apart, yet short-lived cycles are still freed, and the process's settings come back."""

from __future__ import annotations

import gc
import weakref

from click.testing import CliRunner

from recommender.cli import gctune
from recommender.cli.main import main


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_cycles_made_inside_are_still_freed_and_settings_come_back() -> None:
    was, frozen = gc.get_threshold(), gc.get_freeze_count()
    collections = gc.get_stats()[0]["collections"]
    with gctune.fewer_collections():
        assert gc.get_threshold() == (gctune.YOUNG, gctune.OLDER, gctune.OLDER)
        assert gc.get_freeze_count() > frozen and gc.isenabled()
        first = _Node()
        gone = weakref.ref(first)
        del first
        for _ in range(3 * gctune.YOUNG):  # allocations enough for young collections, and no explicit collect
            _Node()
        assert gone() is None
        assert gc.get_stats()[0]["collections"] - collections <= 3 * 2  # not ~430 at the default 700
    assert gc.get_threshold() == was and gc.get_freeze_count() == frozen


def test_a_report_leaves_the_collector_as_it_was() -> None:
    was, frozen = gc.get_threshold(), gc.get_freeze_count()
    res = CliRunner().invoke(main, ["report", "--demo", "-o", "json"])
    assert res.exit_code == 0, res.output
    bad = CliRunner().invoke(main, ["report", "--demo", "-o", "nosuchformat"])
    assert bad.exit_code != 0
    assert gc.get_threshold() == was and gc.get_freeze_count() == frozen
