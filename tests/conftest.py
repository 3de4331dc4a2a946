"""Fixtures shared by several test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.promfixture import prometheus_binaries


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real Prometheus over the small realistic cluster of tests/promcluster.py (built once per run)."""
    if prometheus_binaries() is None:
        pytest.skip("Debian's prometheus/promtool not installed (apt-get install -y prometheus)")
    from tests.promcluster import serve

    with serve(tmp_path_factory.mktemp("prom")) as running:
        yield running
