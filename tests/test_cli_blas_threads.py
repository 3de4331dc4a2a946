"""The command line runs numpy's BLAS on one thread unless the user's environment says otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# what a report process sees: the CLI package imported first, numpy after it (threadpoolctl comes with scikit-learn)
PROBE = ("import recommender.cli.main, numpy, threadpoolctl, json; print(json.dumps([i['num_threads'] for i in "
         "threadpoolctl.threadpool_info() if i['user_api'] == 'blas']))")


def _blas_threads(**env: str) -> list[int]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith(("_NUM_THREADS", "_MAXIMUM_THREADS"))}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, "PYTHONPATH": str(REPO), **env}, cwd=REPO,
                         capture_output=True, text=True, check=True, timeout=120)
    return list(json.loads(out.stdout))


def test_the_cli_caps_blas_at_one_thread() -> None:
    threads = _blas_threads()
    if not threads:
        pytest.skip("numpy loaded no BLAS that threadpoolctl can see")
    assert threads == [1] * len(threads)


def test_a_cap_the_user_set_is_kept() -> None:
    threads = _blas_threads(OPENBLAS_NUM_THREADS="2", MKL_NUM_THREADS="2", BLIS_NUM_THREADS="2")
    if not threads:
        pytest.skip("numpy loaded no BLAS that threadpoolctl can see")
    assert threads == [min(2, os.cpu_count() or 2)] * len(threads)
