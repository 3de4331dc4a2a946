"""Fixtures shared by several test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from recommender.core.plan import Plan
from recommender.core.usage import Snapshot
from tests import planfixture as pf
from tests.promfixture import prometheus_binaries


@pytest.fixture(scope="session", autouse=True)
def _session_cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Reports made by module and session fixtures keep their cache here, never in the user's ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


@pytest.fixture(autouse=True)
def _own_cache_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's reports keep their cache in a folder of their own, never the user's ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


@pytest.fixture(scope="module")
def plan() -> Plan:
    """The hand-made five-workload plan the report formats are golden-tested on (tests/planfixture.py)."""
    return pf.plan()


@pytest.fixture(scope="module")
def snap() -> Snapshot:
    """The snapshot behind :func:`plan`."""
    return pf.snapshot()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real Prometheus over the small realistic cluster of tests/promcluster.py (built once per run)."""
    if prometheus_binaries() is None:
        pytest.skip("Debian's prometheus/promtool not installed (apt-get install -y prometheus)")
    from tests.promcluster import serve

    with serve(tmp_path_factory.mktemp("prom")) as running:
        yield running
