"""A report runs with fewer garbage collections (recommender.cli.gctune): what was alive is frozen and young
collections are far apart, yet short-lived cycles are still freed, and the process's settings come back."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

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


def test_what_the_first_step_makes_is_frozen_with_what_was_alive() -> None:
    """``first`` (a command's imports) runs inside, and what it made is frozen with what was alive before: the
    block's young collections never walk it; afterwards everything is as it was."""
    frozen = gc.get_freeze_count()
    made: list[list[int]] = []
    with gctune.fewer_collections():
        bare = gc.get_freeze_count()
    with gctune.fewer_collections(lambda: made.extend([i] for i in range(5_000))):
        assert gc.get_freeze_count() - bare >= 5_000
    assert len(made) == 5_000 and gc.get_freeze_count() == frozen


def _exit_collections(skip: bool) -> list[str]:
    """What a fresh interpreter prints from the moment its atexit handlers run: a line per collection started."""
    import subprocess
    import sys

    code = ("import atexit, gc, os\nfrom recommender.cli import gctune\n"
            f"if {skip}:\n    gctune.no_collection_at_exit()\n    gctune.no_collection_at_exit()\n"
            "gc.callbacks.append(lambda phase, info: os.write(1, b'collect\\n') if phase == 'start' else None)\n"
            "atexit.register(lambda: os.write(1, b'exiting\\n'))  # runs first (last registered)\n")
    root = Path(__file__).resolve().parents[1]  # this checkout's gctune, first on the path of ``-c``
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root).stdout
    return out.split("exiting\n", 1)[1].split()


def test_the_exiting_process_skips_its_last_collection() -> None:
    """The interpreter's last full collection (a walk of every object left) happens unless a report asked for
    none: ``no_collection_at_exit`` (once, however often it is called) turns the collector off at exit."""
    assert _exit_collections(skip=False) == ["collect"]
    assert _exit_collections(skip=True) == []
