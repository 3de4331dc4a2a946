"""The scale benchmark's synthetic fleet with ``--churn``: every pod renamed at every N-th block range, as a rollout
gives, read back from the blocks promtool wrote (``promtool tsdb dump``)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.promfixture import prometheus_binaries

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import scale_tsdb

pytestmark = pytest.mark.skipif(prometheus_binaries() is None,
                                reason="Debian's prometheus/promtool not installed (apt-get install -y prometheus)")
STEP_S = 1800  # a sample every 30 min: a small TSDB
DUMP_LINE = re.compile(r'pod="(?P<pod>[^"]+)".*?\} \S+ (?P<ms>\d+)$')


def _pods_by_block_range(data: Path) -> dict[int, set[str]]:
    """The FB-used series' pod names in each block range of the TSDB."""
    (data / "wal").mkdir(exist_ok=True)  # promtool's reader opens the write-ahead log too
    dump = subprocess.run(["promtool", "tsdb", "dump", "--match", '{__name__="DCGM_FI_DEV_FB_USED"}', str(data)],
                          capture_output=True, text=True, check=True).stdout
    out: dict[int, set[str]] = defaultdict(set)
    for line in dump.splitlines():
        hit = DUMP_LINE.search(line)
        if hit:
            out[int(hit["ms"]) // 1000 // scale_tsdb.BLOCK_S].add(hit["pod"])
    return dict(out)


@pytest.mark.parametrize("churn", [None, 1, 2])
def test_churn_renames_every_pod_at_every_nth_block_range(tmp_path: Path, churn: int | None) -> None:
    end_s = (1_795_800_000 // scale_tsdb.BLOCK_S) * scale_tsdb.BLOCK_S + 3 * 3600  # 3 h into a block range
    data = tmp_path / "data"
    scale_tsdb.build_tsdb(data, 2, 7.0, STEP_S, end_s, churn=churn)
    pods = _pods_by_block_range(data)
    ranges = sorted(pods)
    assert len(ranges) == 5  # 7 days over 54 h ranges, ending 3 h into one: 3 + 3 x 54 + 3 h
    assert all(len(pods[r]) == 2 for r in ranges)  # two workloads, one pod each at a time
    names = [frozenset(pods[r]) for r in ranges]
    if churn is None:
        assert len(set(names)) == 1 and all(p.endswith("-x2k4p") for p in names[0])
    else:  # a new pair of names wherever the range's number // churn changes, and only there
        for a, b, ra, rb in zip(names, names[1:], ranges, ranges[1:], strict=False):
            assert (a != b) == (ra // churn != rb // churn)
            if a != b:
                assert not a & b  # every pod replaced, none kept
