"""A tiny progress protocol so collectors can report progress without knowing about the terminal."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Receives progress from long steps (queries, API listing). The CLI renders it with rich."""

    def start(self, task: str, total: int) -> None: ...

    def advance(self, task: str, n: int = 1) -> None: ...

    def log(self, message: str) -> None: ...


class NullProgress:
    """Progress sink that drops everything (tests, library use)."""

    def start(self, task: str, total: int) -> None:
        return None

    def advance(self, task: str, n: int = 1) -> None:
        return None

    def log(self, message: str) -> None:
        return None


class RecordingProgress:
    """Progress sink that remembers what it was told (tests assert on it)."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.done: dict[str, int] = {}
        self.messages: list[str] = []

    def start(self, task: str, total: int) -> None:
        self.totals[task] = total
        self.done.setdefault(task, 0)

    def advance(self, task: str, n: int = 1) -> None:
        self.done[task] = self.done.get(task, 0) + n

    def log(self, message: str) -> None:
        self.messages.append(message)
