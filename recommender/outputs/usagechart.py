"""One workload's usage chart for the HTML report: what it used against what it holds and should get.

Memory panel: framebuffer used per device (``fb_used_mib``) against the device (or slice) memory held,
the recommended device/slice memory, and the memory need (target line, lower..upper band).
Compute panel: engine activity scaled to a share of one whole GPU (``gr_engine_active_frac`` × the
SM share held, the same scaling the sizing policy uses) against the share held and recommended and
the compute need. A panel whose series is absent is left out; no series at all means no chart.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from recommender.core.inventory import Allocation, Sharing
from recommender.core.plan import Bound, Recommendation
from recommender.core.usage import FB_USED_MIB, GR_ENGINE_ACTIVE_FRAC, Snapshot
from recommender.outputs import charts
from recommender.outputs.charts import COLORS, Level, Panel
from recommender.outputs.text import alloc_text


@dataclass(frozen=True)
class Chart:
    """An inline SVG (None when there was nothing to draw) and the notes that explain it."""

    svg: str | None
    notes: tuple[str, ...]




def _per_device(alloc: Allocation, share: float) -> bool:
    """Engine activity covers the whole shared device (time-slicing, MPS or KAI without a share)."""
    return alloc.sharing in (Sharing.TIME_SLICING, Sharing.MPS, Sharing.KAI) and share >= 1.0


def _need(b: Bound | None, fmt: str, unit: str) -> list[Level]:
    if b is None:
        return []
    return [Level(f"need {format(b.target, fmt)}{unit}", b.target, COLORS["band"], ":", b.lower, b.upper,
                  f"need range {format(b.lower, fmt)}–{format(b.upper, fmt)}")]


def _memory_levels(rec: Recommendation) -> list[Level]:
    levels = []
    held = rec.workload.allocation.device_memory_mib
    if held is not None:
        levels.append(Level(f"held {held:,.0f} MiB", held, COLORS["held"]))
    if rec.recommended is not None and rec.recommended.device_memory_mib is not None:
        levels.append(Level(f"recommended {rec.recommended.device_memory_mib:,.0f} MiB",
                            rec.recommended.device_memory_mib, COLORS["rec"], "--"))
    return levels + _need(rec.memory_need_mib, ",.0f", " MiB")


def _compute_levels(rec: Recommendation, held_share: float, per_device: bool) -> list[Level]:
    """Held share, recommended share and need; under time-slicing/MPS the reference is the device."""
    held = rec.workload.allocation
    label = f"device (holds {alloc_text(held)})" if per_device else f"held share {held_share:.2f}"
    levels = [Level(label, held_share, COLORS["held"])]
    if rec.advice.share_recommended is not None:
        rec_share = rec.advice.share_recommended.frac
        levels.append(Level(f"recommended share {rec_share:.2f}", rec_share, COLORS["rec"], "--"))
    return levels + _need(rec.compute_need_frac, ".2f", "")


def _notes(rec: Recommendation, memory: pd.Series | None, compute: pd.Series | None,
           caveat: str | None) -> tuple[str, ...]:
    notes = []
    if rec.workload.allocation.vllm is not None and memory is not None:
        notes.append("vLLM pre-allocates its KV cache, so framebuffer use sits near --gpu-memory-utilization; "
                     "the need counts the KV cache in use")
    if memory is None:
        notes.append("no framebuffer series (fb_used_mib) for this workload")
    if compute is None:
        notes.append("no engine-activity series (gr_engine_active_frac) for this workload")
    if caveat:
        notes.append(caveat)
    return tuple(notes)


def usage_chart(rec: Recommendation, snapshot: Snapshot | None, salt: str) -> Chart:
    """The chart for one workload, or ``Chart(None, why)`` when the snapshot has no series for it."""
    if snapshot is None:
        return Chart(None, ("no usage series: the report was rendered without a snapshot",))
    memory = snapshot.series(FB_USED_MIB, rec.ref)
    engine = snapshot.series(GR_ENGINE_ACTIVE_FRAC, rec.ref)
    if memory is None and engine is None:
        return Chart(None, ("no usage series for this workload",))
    share = rec.advice.share_today  # the SM share the compute policy gives a replica (recommender.pipeline.advice)
    held_share, caveat = (share.frac, share.caveat) if share else (1.0, "SM share held unknown: a plan without advice")
    panels = []
    if memory is not None:
        panels.append(Panel(memory, "max", "framebuffer used", "MiB per device", _memory_levels(rec)))
    if engine is not None:
        per_device = _per_device(rec.workload.allocation, held_share)
        label = "engine active (whole device)" if per_device else "engine active × share held"
        panels.append(Panel(engine * held_share, "mean", label, "share of one GPU",
                            _compute_levels(rec, held_share, per_device), ".2f"))
    with charts.chart_style(salt):
        svg = charts.to_svg(charts.usage_figure(panels))
    return Chart(svg, _notes(rec, memory, engine, caveat))
