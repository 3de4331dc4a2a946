"""The names batch schedulers give their GPU fractions (Volcano vGPU, Run:ai), read from
``recommender/data/schedulers.yaml``: reference.md does not verify them, so they live in data, marked
``verified: false``, where a user corrects them without touching code."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from recommender.core.catalogue import DATA_DIR
from recommender.core.errors import ConfigError
from recommender.core.yamlfile import read_mapping

FILE = DATA_DIR / "schedulers.yaml"


@dataclass(frozen=True)
class VolcanoNames:
    """Volcano vGPU's resource names (per container) and its scheduler's name."""

    number: str
    memory_mib: str
    cores_pct: str
    scheduler_name: str
    enforces_memory: bool
    verified: bool


@dataclass(frozen=True)
class RunaiNames:
    """Run:ai's fraction annotations (per pod) and the scheduler name that makes them Run:ai's, not KAI's."""

    fraction: str
    memory_mib: str
    scheduler_name: str
    verified: bool


def _text(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(f"{FILE}: {where} must be a non-empty string")
    return raw.strip()


def _section(raw: dict[str, Any], key: str) -> dict[str, Any]:
    got = raw.get(key)
    if not isinstance(got, dict):
        raise ConfigError(f"{FILE}: {key} must be a mapping")
    return got


@lru_cache(maxsize=1)
def volcano_names() -> VolcanoNames:
    v = _section(read_mapping(FILE, "scheduler names"), "volcano_vgpu")
    res = _section(v, "resources")
    number, memory, cores = (_text(res.get(k), f"volcano_vgpu.resources.{k}") for k in ("number", "memory_mib",
                                                                                        "cores_pct"))
    return VolcanoNames(number, memory, cores,
                        _text(v.get("scheduler_name"), "volcano_vgpu.scheduler_name"),
                        bool(v.get("enforces_memory", False)), v.get("verified") is True)


@lru_cache(maxsize=1)
def runai_names() -> RunaiNames:
    r = _section(read_mapping(FILE, "scheduler names"), "runai")
    ann = _section(r, "annotations")
    return RunaiNames(_text(ann.get("fraction"), "runai.annotations.fraction"),
                      _text(ann.get("memory_mib"), "runai.annotations.memory_mib"),
                      _text(r.get("scheduler_name"), "runai.scheduler_name"), r.get("verified") is True)


def unverified(verified: bool) -> str:
    """The caveat a report carries for names reference.md does not verify."""
    return "" if verified else f" (names unverified: {FILE.name})"
