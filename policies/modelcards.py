"""Model cards: KV-cache bytes per token and weight size per model family, loaded from data.

vLLM pre-allocates its KV cache, so its framebuffer use says nothing about need; with the bytes one
token of KV costs we can turn ``kv_usage_frac x kv_capacity_tokens`` back into memory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from recommender.core.errors import ConfigError
from recommender.core.yamlfile import read_mapping

DATA_FILE = Path(__file__).parent / "data" / "models.yaml"


@dataclass(frozen=True)
class ModelCard:
    key: str
    match: str
    kv_bytes_per_token: float
    weights_gib: float | None
    verified: str


@dataclass(frozen=True)
class ModelCards:
    cards: tuple[ModelCard, ...] = ()

    def find(self, model_name: str | None) -> ModelCard | None:
        """First card whose pattern matches the model name (case-insensitive), or None."""
        if not model_name:
            return None
        text = model_name.lower()
        return next((c for c in self.cards if re.search(c.match, text)), None)


def parse_model_cards(raw: Mapping[str, Any]) -> ModelCards:
    try:
        cards = tuple(
            ModelCard(
                key=k,
                match=str(v["match"]),
                kv_bytes_per_token=float(v["kv_bytes_per_token"]),
                weights_gib=float(v["weights_gib"]) if v.get("weights_gib") is not None else None,
                verified=str(v.get("verified", "INF")),
            )
            for k, v in raw["models"].items()
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"invalid model catalogue: {type(exc).__name__}: {exc}") from exc
    for c in cards:
        try:
            re.compile(c.match)
        except re.error as exc:
            raise ConfigError(f"model catalogue entry {c.key}: bad regex {c.match!r}: {exc}") from exc
    return ModelCards(cards)


@lru_cache(maxsize=8)
def load_model_cards(override: str | None = None) -> ModelCards:
    """Bundled model cards; an override file's entries come first, then replace by key."""
    raw = read_mapping(DATA_FILE, "'models'", ("models",))
    if override:
        extra = read_mapping(Path(override), "'models'", ("models",))["models"]
        raw = {"models": {**extra, **{k: v for k, v in raw["models"].items() if k not in extra}}}
    return parse_model_cards(raw)
