"""Forecasts shared with a forked child (``run_once(fork=True)``, as a report does): it makes them from the front
while the features and classes are made here, this process the rest from the back, and the plan is the same;
where no child can be had, or it hangs, dies, fails or sends something malformed, they are made here. Every child
here is a real fork; deadlines are tiny so that a hung child costs the test nothing."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collectors.files import read_snapshot
from recommender.core.settings import ForecastSettings, Settings
from recommender.demo import demo_path
from recommender.outputs.jsondoc import render_json
from recommender.pipeline import aside as aside_mod
from recommender.pipeline import run
from recommender.pipeline.aside import Shared, _Answers, fits, share

PARENT = os.getpid()
FORKING = Settings(forecast=ForecastSettings(fork_within_mib=None))  # this process' size does not decide


def _started(n: int, make: Any, check: Any = lambda _: True) -> Shared[Any]:
    started = share(n, make, check)
    if started is None:
        pytest.skip("one core or no fork here: nothing is shared")
    return started


def _tagged(i: int) -> tuple[int, int]:
    return i * 2, os.getpid()


def _values(got: dict[int, Any]) -> dict[int, int]:
    return {i: v[0] for i, v in got.items()}


def _fresh(script: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``script`` run by a fresh interpreter in the repository."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout_s,
                          cwd=Path(__file__).resolve().parents[1])


def _no_child_left() -> bool:
    return not multiprocessing.active_children()


def test_every_item_comes_back_made_by_one_or_the_other() -> None:
    got = _started(40, lambda i: np.arange(i) / 3).result()
    assert sorted(got) == list(range(40))
    assert all(np.array_equal(v, np.arange(i) / 3) for i, v in got.items())
    assert _no_child_left()


def _hangs_in_the_child(i: int) -> tuple[int, int]:
    if os.getpid() != PARENT and i == 2:
        time.sleep(3600)  # the deadline ends it
    if os.getpid() == PARENT:
        time.sleep(0.002)  # the child gets to its items
    return _tagged(i)


def test_a_child_that_hangs_is_stopped_at_the_deadline_and_its_item_made_here() -> None:
    started = _started(60, _hangs_in_the_child)
    got = started.result(wait_s=0.05)
    assert _values(got) == {i: 2 * i for i in range(60)}
    assert got[2][1] == PARENT  # the item it hung on
    assert all(pid == PARENT for i, (_, pid) in got.items() if i >= 2)  # it took nothing after it
    assert _no_child_left()


def test_a_hung_child_is_stopped_at_the_default_deadline_too() -> None:
    got = _started(8, _hangs_in_the_child).result()  # patience(): the floor here, items are instant
    assert _values(got) == {i: 2 * i for i in range(8)}
    assert _no_child_left()


def _raises_in_the_child(i: int) -> tuple[int, int]:
    if os.getpid() != PARENT and i >= 1:
        raise RuntimeError("in the child")
    return _tagged(i)


def _dies_in_the_child(i: int) -> tuple[int, int]:
    if os.getpid() != PARENT and i >= 1:
        os._exit(3)
    return _tagged(i)


def _cannot_send(i: int) -> object:
    return (lambda: i) if os.getpid() != PARENT else _tagged(i)  # a lambda cannot be pickled


@pytest.mark.parametrize("make", [_raises_in_the_child, _dies_in_the_child, _cannot_send])
def test_what_a_failed_child_took_and_did_not_send_is_made_here(make: Any) -> None:
    got = _started(50, make).result(wait_s=0.05)
    assert _values(got) == {i: 2 * i for i in range(50)}
    assert all(pid == PARENT for i, (_, pid) in got.items() if i >= 1)
    assert _no_child_left()


class _Explodes:
    """Pickles, and fails to unpickle: a garbled answer, as the parent reads it."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _explode, ()


def _explode() -> None:
    raise ValueError("garbled")


SENT_BAD = Path("/nonexistent")  # set by the test: the child touches it when it sends its malformed item


def _bad_after_good(bad: object) -> Any:
    def make(i: int) -> object:
        if os.getpid() != PARENT:
            if i == 3:
                SENT_BAD.touch()
                return bad
            return _tagged(i)
        for _ in range(1000):  # this process leaves items 0-3 to the child (bounded: 10 s)
            if SENT_BAD.exists():
                break
            time.sleep(0.01)
        return _tagged(i)
    return make


_garbled_in_the_child = _bad_after_good(_Explodes())
_wrong_kind_in_the_child = _bad_after_good("not a pair")


@pytest.mark.parametrize("make", [_garbled_in_the_child, _wrong_kind_in_the_child])
def test_a_child_that_sends_anything_malformed_is_not_trusted_at_all(make: Any, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "SENT_BAD", tmp_path / "sent")
    got = _started(60, make, lambda v: isinstance(v, tuple)).result(wait_s=0.05)
    assert _values(got) == {i: 2 * i for i in range(60)}
    assert {pid for _, pid in got.values()} == {PARENT}  # its good items 0-2 too
    assert _no_child_left()


def _answers(messages: list[bytes]) -> _Answers:
    receive, send = multiprocessing.Pipe(duplex=False)
    answers = _Answers(receive, 10, lambda v: isinstance(v, int))
    for raw in messages:
        send.send_bytes(raw)
    send.close()
    assert answers.over.wait(10)
    return answers


def _item(i: object, value: object = 1, seconds: object = 0.5) -> bytes:
    return pickle.dumps(("item", i, value, seconds))


@pytest.mark.parametrize("messages", [
    [_item(0), _item(0)],  # the same item twice
    [_item(0), _item(10)],  # an index out of range
    [_item(0), _item(True)],  # not an int
    [_item(0), _item(1, "x")],  # a value check refuses
    [_item(0), _item(1, 1, "slow")],  # no seconds
    [_item(0), pickle.dumps(("done", 2))],  # done with more than it sent
    [_item(0), pickle.dumps(("hello", 1))],  # not a message
    [_item(0), _item(1)[:-3]],  # cut short
])
def test_malformed_answers_leave_nothing_trusted(messages: list[bytes]) -> None:
    answers = _answers(messages)
    assert answers.bad and answers.trusted() == {}


def test_whole_answers_are_kept_where_the_child_is_gone_before_done() -> None:
    answers = _answers([_item(0, 5), _item(4, 7, 1.5)])
    assert not answers.bad and answers.trusted() == {0: 5, 4: 7} and answers.slowest_s == 1.5


def test_the_child_is_stopped_when_this_process_raises_before_the_result() -> None:
    with pytest.raises(KeyError), _started(5, _hangs_in_the_child):
        raise KeyError("the features failed")
    assert _no_child_left()


def test_the_child_dies_with_this_process() -> None:
    script = ("import os, signal, sys, time\n"
              "from recommender.pipeline.aside import share\n"
              "def make(i):\n"
              "    time.sleep(3600)\n"
              "s = share(4, make)\n"
              "if s is None: print('none', flush=True); sys.exit(0)\n"
              "print(s._process.pid, flush=True)\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = _fresh(script, timeout_s=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    if done.stdout.strip() == "none":
        pytest.skip("one core or no fork here: nothing is shared")
    child = int(done.stdout)
    for _ in range(200):  # bounded: the kernel kills it at once, its reaping may lag
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.05)
    pytest.fail(f"child {child} outlived its parent")


def test_nothing_is_forked_on_one_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aside_mod, "cores", lambda: 1)
    assert share(3, lambda i: i) is None


@pytest.mark.parametrize("platform", ["darwin", "win32", "freebsd14"])
def test_nothing_is_forked_off_linux(monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    monkeypatch.setattr(aside_mod, "cores", lambda: 8)
    monkeypatch.setattr(aside_mod.sys, "platform", platform)
    assert share(3, lambda i: i) is None


@pytest.mark.parametrize(("files", "quota"), [
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "250000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cpu.max": "0 100000\n"}, None),
    ({"cpu.max": "lots\n"}, None),
    ({}, None),
])
def test_a_containers_cpu_limit_is_read_from_its_cgroup(tmp_path: Path, files: dict[str, str],
                                                         quota: float | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert aside_mod.cpu_quota(tmp_path) == quota


def test_a_cpu_limit_under_two_cores_forks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aside_mod.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3}, raising=False)
    (tmp_path / "cpu.max").write_text("190000 100000\n")
    assert aside_mod.cores(tmp_path) == 1
    (tmp_path / "cpu.max").write_text("300000 100000\n")
    assert aside_mod.cores(tmp_path) == 3
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert aside_mod.cores(tmp_path) == 4
    monkeypatch.setattr(aside_mod, "cpu_quota", lambda _root: 1.5)  # the limit where it is mounted
    assert share(3, lambda i: i) is None


def test_a_fork_fits_where_twice_this_process_does() -> None:
    here = aside_mod.resident_mib()
    assert here is not None and here > 0
    assert fits(None) and fits(2 * here + 64) and not fits(2 * here - 64)


@pytest.fixture
def made_in(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The process ids that made each forecast, as this process sees them (a child's calls are not seen)."""
    pids: list[int] = []
    real = run.forecast_workload

    def spy(*args: Any) -> Any:
        pids.append(os.getpid())
        return real(*args)

    monkeypatch.setattr(run, "forecast_workload", spy)
    monkeypatch.setattr(run, "FORK_MIN_FORECASTS", 1)
    return pids


@pytest.mark.parametrize("release", [False, True])
def test_forecasts_shared_with_a_child_give_the_same_plan(made_in: list[int], release: bool) -> None:
    snap = read_snapshot(demo_path())
    light = replace(snap, usage={})
    here = render_json(run.run_once(snap, FORKING, snap.end), light)
    total = len(made_in)
    assert total  # the demo has forecasts to make
    made_in.clear()
    handed = replace(snap, usage=dict(snap.usage))
    forked = render_json(run.run_once(handed, FORKING, snap.end, fork=True, memo={}, release=release), light)
    if aside_mod.cores() < 2:
        pytest.skip("one core: nothing is shared")
    assert len(made_in) < total  # the child made some (it starts before the features; this process at the end)
    assert forked == here
    assert _no_child_left()


def test_forecasts_are_made_here_when_a_child_hangs(made_in: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    snap = read_snapshot(demo_path())
    light = replace(snap, usage={})
    here = render_json(run.run_once(snap, FORKING, snap.end), light)
    real = run.forecast_workload

    def hangs(*args: Any) -> Any:
        if os.getpid() != PARENT:
            time.sleep(3600)
        return real(*args)

    monkeypatch.setattr(run, "forecast_workload", hangs)
    monkeypatch.setattr(aside_mod, "patience", lambda slowest_s: 0.05)
    assert render_json(run.run_once(snap, FORKING, snap.end, fork=True), light) == here
    assert _no_child_left()


def test_the_child_is_stopped_when_the_features_raise(monkeypatch: pytest.MonkeyPatch, made_in: list[int]) -> None:
    snap = read_snapshot(demo_path())
    started: list[Any] = []
    real = run.share

    def spy(*args: Any) -> Any:
        started.append(real(*args))
        return started[-1]

    def fails(*args: Any) -> Any:
        raise ZeroDivisionError("a feature failed")

    monkeypatch.setattr(run, "share", spy)
    monkeypatch.setattr(run, "_features", fails)
    with pytest.raises(ZeroDivisionError):
        run.run_once(snap, FORKING, snap.end, fork=True)
    if not started or started[0] is None:
        pytest.skip("one core or no fork here: nothing is shared")
    assert _no_child_left()


@pytest.mark.parametrize("why", ["one core", "no room"])
def test_forecasts_are_made_here_when_no_child_can_be_had(made_in: list[int], monkeypatch: pytest.MonkeyPatch,
                                                          why: str) -> None:
    snap = read_snapshot(demo_path())
    light = replace(snap, usage={})
    here = render_json(run.run_once(snap, Settings(), snap.end), light)
    made_in.clear()
    settings = Settings()
    if why == "one core":
        monkeypatch.setattr(aside_mod, "cores", lambda: 1)
        settings = FORKING
    else:
        settings = Settings(forecast=ForecastSettings(fork_within_mib=1))
    assert render_json(run.run_once(snap, settings, snap.end, fork=True), light) == here
    assert made_in and set(made_in) == {os.getpid()}
    assert _no_child_left()


def test_forecasts_the_memo_holds_are_not_made_again(made_in: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    snap = read_snapshot(demo_path())
    memo: dict[str, Any] = {}
    first = run.run_once(snap, FORKING, snap.end, memo=memo)
    made_in.clear()
    started: list[object] = []
    real = run.share

    def spy(*args: Any) -> Any:
        started.append(args)
        return real(*args)

    monkeypatch.setattr(run, "share", spy)
    again = run.run_once(snap, FORKING, snap.end, memo=memo, fork=True)
    assert not started and not made_in  # every forecast was in the memo: no child
    light = replace(snap, usage={})
    assert render_json(again, light) == render_json(first, light)


def test_the_child_inherits_the_forecasts_imports_instead_of_importing_them(tmp_path: Path) -> None:
    """A fresh interpreter (none of statsmodels imported by an earlier test): each forecast records, in the process
    that makes it, whether statsmodels' Holt-Winters was already there; the copy's first one finds it."""
    seen = tmp_path / "seen"
    script = ("import os, sys\n"
              "from collectors.files import read_snapshot\n"
              "from recommender.core.settings import ForecastSettings, Settings\n"
              "from recommender.demo import demo_path\n"
              "from recommender.pipeline import aside, run\n"
              "if aside.share(1, lambda i: i) is None: print('none'); sys.exit(0)\n"
              "real = run.forecast_workload\n"
              "def spy(*args):\n"
              f"    with open({str(seen)!r}, 'a') as f:\n"
              "        f.write(f\"{os.getpid()} {'statsmodels.tsa.holtwinters' in sys.modules}\\n\")\n"
              "    return real(*args)\n"
              "run.forecast_workload = spy\n"
              "run.FORK_MIN_FORECASTS = 1\n"
              "assert 'statsmodels.tsa.holtwinters' not in sys.modules\n"
              "snap = read_snapshot(demo_path())\n"
              "run.run_once(snap, Settings(forecast=ForecastSettings(fork_within_mib=None)), snap.end, fork=True)\n"
              "print(os.getpid())\n")
    done = _fresh(script, timeout_s=300)
    assert done.returncode == 0, done.stderr
    if done.stdout.strip() == "none":
        pytest.skip("one core or no fork here: nothing is shared")
    parent = int(done.stdout.split()[-1])
    made = [line.split() for line in seen.read_text().splitlines()]
    theirs = [had for pid, had in made if int(pid) != parent]
    assert theirs, "the copy made no forecast"
    assert theirs[0] == "True"
