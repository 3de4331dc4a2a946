"""Which pods are live at the window's end (``collectors.snapshot._Presence``), found without a frame-sized
mask, against the whole-mask reading it replaced."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from collectors.snapshot import _Presence
from recommender.core import usage as m


def _reference(frame: pd.DataFrame, pods: list[str]) -> list[str]:
    matrix = frame.notna().to_numpy()
    cols = [(p, frame.columns.get_loc(p)) for p in pods if p in frame.columns]
    if not cols:
        return list(pods)
    sub = matrix[:, [c for _, c in cols]]
    rows = np.flatnonzero(sub.any(axis=1))
    return [p for (p, _), live in zip(cols, sub[rows[-1]], strict=True) if live] if rows.size else list(pods)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_live_pods_are_those_with_data_at_the_last_step_any_had_data(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    steps, pods = int(rng.integers(1, 40)), int(rng.integers(1, 700))  # over 256 columns: several slices
    values = rng.integers(0, 80_000, (steps, pods)).astype(dtype)
    values[rng.random((steps, pods)) < rng.choice([0.0, 0.5, 0.95, 1.0])] = np.nan
    ended = rng.integers(0, steps + 1, pods)  # pods that stopped reporting
    for c, e in enumerate(ended):
        values[e:, c] = np.nan
    names = [f"ns/p{i}" for i in range(pods)]
    frame = pd.DataFrame(values, columns=names)
    presence = _Presence({m.FB_USED_MIB: frame})
    for _ in range(20):
        group = list(rng.choice(names, size=int(rng.integers(1, min(pods, 9) + 1)), replace=False))
        group += ["ns/not-in-the-frame"] * int(rng.integers(0, 2))
        assert presence.live_pods(group) == _reference(frame, group)


def test_without_framebuffer_data_every_pod_counts() -> None:
    assert _Presence({}).live_pods(["a/b", "a/c"]) == ["a/b", "a/c"]
