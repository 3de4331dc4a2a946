"""Freed memory handed back: a no-op, never an error, where the C library cannot."""

from __future__ import annotations

import pytest

from recommender.core import memory


def test_freed_memory_goes_back_through_malloc_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    monkeypatch.setattr(memory, "_trim", lambda: trim)
    assert memory.give_back_freed() and calls == [0]  # every arena, no padding kept


def test_without_malloc_trim_nothing_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_trim", lambda: None)  # musl, macOS
    assert memory.give_back_freed() is False
