"""The bundled demo cluster: a snapshot directory built by ``benchmarks/build_demo.py`` from public traces.

It ships inside the package so that ``rightsizer report --demo`` works without a cluster, Prometheus
or the traces themselves. See README.md here for what it holds and how it was derived.
"""

from __future__ import annotations

from pathlib import Path


def demo_path() -> Path:
    """Directory holding the demo's snapshot.json and usage.parquet (read it with collectors.files)."""
    return Path(__file__).resolve().parent
