"""The bounds table of the data-quality stage, read once from the package's ``data/bounds.yaml``."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml

from recommender.analysis.quality import BoundsTable, parse_bounds

BOUNDS_FILE = "bounds.yaml"


@cache
def load_bounds() -> BoundsTable:
    """The physical bounds of every canonical usage metric (``recommender/data/bounds.yaml``)."""
    text = resources.files("recommender").joinpath("data", BOUNDS_FILE).read_text(encoding="utf-8")
    return parse_bounds(yaml.safe_load(text))
