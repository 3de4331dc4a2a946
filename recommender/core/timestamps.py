"""Kubernetes API timestamps, parsed in one place for the collectors and the controller's pure rules."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def parse_time(text: Any) -> datetime | None:
    """An API timestamp (RFC 3339, ``Z`` for UTC, with or without microseconds); None when absent or bad."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
