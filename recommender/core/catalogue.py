"""The GPU catalogue: MIG shapes, profiles and memory per GPU model, loaded from data.

Facts live in ``recommender/data/gpus.yaml`` (from reference.md), not in code, so a user can correct an
unverified entry with an override file. Reading files is the one I/O here and happens once, at the
edge (``load_catalogue``); everything else takes a :class:`Catalogue`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

from recommender.core.errors import ConfigError
from recommender.core.yamlfile import read_mapping

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
_EXPECTED = "'shapes' and/or 'gpus'"
FALLBACK_USABLE_FRAC = 0.9  # usable/nominal for estimates when no row in the catalogue gives usable_mib
_NOMINAL = re.compile(r"\.(\d+)gb")


@dataclass(frozen=True)
class Shape:
    """A MIG GPU-instance shape: slices it takes and where it may start."""

    name: str
    mem_slices: int
    sm_slices: int
    max_count: int
    starts: tuple[int, ...]


@dataclass(frozen=True)
class MigProfile:
    """A named MIG profile of one GPU model (e.g. ``3g.40gb`` on A100-80GB)."""

    name: str
    shape: Shape
    usable_mib: float
    usable_verified: bool  # False: estimated from the name, say so in reasons
    verified: str  # HW | V | 3P | INF (gpus.yaml's legend)

    @property
    def has_media(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True)
class GpuModel:
    """One GPU model: its memory, and its MIG profiles (empty when it has no MIG)."""

    key: str
    memory_mib: float
    memory_slices: int = 0
    sm_slices: int = 0
    profiles: tuple[MigProfile, ...] = ()
    placements_verified: str = "INF"
    products: tuple[str, ...] = ()

    @property
    def supports_mig(self) -> bool:
        return bool(self.profiles)

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def share(self, profile: MigProfile) -> float:
        """Share of the whole GPU a profile occupies: the larger of its memory and SM fractions."""
        return max(profile.shape.mem_slices / self.memory_slices, profile.shape.sm_slices / self.sm_slices)


@dataclass(frozen=True)
class Catalogue:
    gpus: Mapping[str, GpuModel] = field(default_factory=dict)
    _canonical: dict[str, str | None] = field(default_factory=dict, init=False, repr=False, compare=False)

    def get(self, key: str | None) -> GpuModel | None:
        return self.gpus.get(key) if key else None

    def canonical(self, product: str | None) -> str | None:
        """Canonical model key for a product string (GFD label or DCGM modelName), None if unknown.

        Ambiguous strings (matching two models) count as unknown: a wrong guess would mis-size.
        """
        if not product:
            return None
        if product in self.gpus:
            return product
        if product in self._canonical:  # a fleet's few product strings, matched once each
            return self._canonical[product]
        text = re.sub(r"[-_]+", " ", product.lower())
        text = re.sub(r"\bmig\b.*$", "", text).removesuffix(" shared").strip()
        hits = {k for k, g in self.gpus.items() if any(re.search(p, text) for p in g.products)}
        found = self._canonical[product] = hits.pop() if len(hits) == 1 else None
        return found


def _shapes(raw: Mapping[str, Any]) -> dict[str, dict[str, Shape]]:
    out: dict[str, dict[str, Shape]] = {}
    for family, spec in raw.items():
        out[family] = {
            name: Shape(name, int(p["mem"]), int(p["sm"]), int(p["max"]), tuple(int(s) for s in p["starts"]))
            for name, p in spec["profiles"].items()
        }
    return out


def _memory_share(gpu: Mapping[str, Any], shape: str, families: Mapping[str, Mapping[str, Any]],
                  shapes: Mapping[str, dict[str, Shape]]) -> Fraction | None:
    family = gpu.get("shape")
    found = shapes.get(family, {}).get(shape) if family else None
    return Fraction(found.mem_slices, int(families[family]["memory_slices"])) if found and family else None


def usable_fracs(gpus: Mapping[str, Any], families: Mapping[str, Mapping[str, Any]],
                 shapes: Mapping[str, dict[str, Shape]]) -> dict[Fraction | None, float]:
    """Per share of the GPU's memory slices (1/8, 1/4, 1/2, 1), the lowest usable/nominal memory ratio of the
    profiles that give ``usable_mib`` (e.g. H200's 1g.18gb: 16 GiB usable of 18 nominal, 0.89; whole-memory
    profiles 0.98-0.99), and under ``None`` the lowest of all: what a profile without one is estimated at, so
    an estimate errs towards too little memory (a larger slice) rather than an out-of-memory one, and follows
    the rows a user adds. Profiles on the same memory slices (3g and 4g) get the same estimate."""
    ratios: dict[Fraction | None, list[float]] = {}
    for g in gpus.values():
        for n, p in ((g or {}).get("profiles") or {}).items():
            if p.get("usable_mib") is not None and (m := _NOMINAL.search(n)):
                r = float(p["usable_mib"]) / (int(m.group(1)) * 1024)
                ratios.setdefault(_memory_share(g, p.get("shape"), families, shapes), []).append(r)
                ratios.setdefault(None, []).append(r)
    return {k: min(v) for k, v in ratios.items()}


def _profile(name: str, spec: Mapping[str, Any], shapes: Mapping[str, Shape], memory_slices: int,
             fracs: Mapping[Fraction | None, float]) -> MigProfile:
    shape = shapes.get(spec["shape"])
    if shape is None:
        raise ConfigError(f"MIG profile {name}: unknown shape {spec['shape']!r}")
    usable = spec.get("usable_mib")
    if usable is None:
        nominal = _NOMINAL.search(name)
        share = Fraction(shape.mem_slices, memory_slices)
        frac = fracs.get(share, fracs.get(None, FALLBACK_USABLE_FRAC))
        usable = float(nominal.group(1)) * 1024 * frac if nominal else 0.0
    return MigProfile(name, shape, float(usable), spec.get("usable_mib") is not None, str(spec.get("verified")))


def _gpu(key: str, spec: Mapping[str, Any], families: Mapping[str, Mapping[str, Any]],
         shapes: Mapping[str, dict[str, Shape]], fracs: Mapping[Fraction | None, float]) -> GpuModel:
    family = spec.get("shape")
    profiles: tuple[MigProfile, ...] = ()
    mem_slices = sm_slices = 0
    if family:
        if family not in shapes:
            raise ConfigError(f"GPU {key}: unknown shape family {family!r}")
        mem_slices = int(families[family]["memory_slices"])
        sm_slices = int(families[family]["sm_slices"])
        profiles = tuple(_profile(n, p, shapes[family], mem_slices, fracs)
                         for n, p in (spec.get("profiles") or {}).items())
    return GpuModel(
        key=key,
        memory_mib=float(spec["memory_mib"]),
        memory_slices=mem_slices,
        sm_slices=sm_slices,
        profiles=profiles,
        placements_verified=str(spec.get("placements_verified", "INF")),
        products=tuple(spec.get("products") or ()),
    )


def parse_catalogue(raw: Mapping[str, Any]) -> Catalogue:
    """Build a catalogue from the YAML structure; raises ConfigError with the offending key."""
    try:
        families = raw["shapes"]
        shapes = _shapes(families)
        fracs = usable_fracs(raw["gpus"], families, shapes)
        return Catalogue({k: _gpu(k, v, families, shapes, fracs) for k, v in raw["gpus"].items()})
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"invalid GPU catalogue: {type(exc).__name__}: {exc}") from exc


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for section in ("shapes", "gpus"):
        merged[section] = {**base.get(section, {}), **(override.get(section) or {})}
    return merged


@lru_cache(maxsize=8)
def load_catalogue(override: str | None = None) -> Catalogue:
    """The bundled catalogue, with a user's override file merged over it by key."""
    raw = read_mapping(DATA_DIR / "gpus.yaml", _EXPECTED)
    if override:
        raw = _merge(raw, read_mapping(Path(override), _EXPECTED))
    return parse_catalogue(raw)
