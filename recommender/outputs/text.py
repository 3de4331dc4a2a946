"""Words and numbers shared by every human-readable format, so table, Markdown and HTML agree.

Each helper turns one typed value into a short string a platform engineer reads at a glance:
``1× A100-80GB``, ``mig 3g.40gb``, ``ts 1/4``, ``$1,606/mo``. Absent values read ``–``, never ``nan``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import numpy as np

from recommender.analysis.demand import DEMAND_METRICS, LABELS
from recommender.analysis.forecast import upper_band
from recommender.core.annotations import MIG_CONFIG_LABEL
from recommender.core.inventory import Allocation, Sharing
from recommender.core.plan import Forecast, NodeMigPlan, Plan, Recommendation, Summary
from recommender.core.usage import FB_USED_MIB, Snapshot

DASH = "–"
NO_REC = "no recommendation: "


def finite(x: float | None) -> float | None:
    """``x`` as a float, or None when absent or not finite (NaN and inf never reach a report)."""
    if x is None:
        return None
    value = float(x)
    return value if math.isfinite(value) else None


def iso_utc(t: datetime) -> str:
    """ISO-8601 UTC with a ``Z``, to the second; naive times are taken as UTC."""
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def human_utc(t: datetime) -> str:
    return iso_utc(t).replace("T", " ").replace("Z", " UTC")


def duration(seconds: float) -> str:
    """``14 d``, ``6.0 h``, ``45 min``: the largest unit that keeps the number readable."""
    if seconds >= 2 * 86_400:
        return f"{seconds / 86_400:.3g} d"
    if seconds >= 3_600:
        return f"{seconds / 3_600:.1f} h"
    return f"{seconds / 60:.0f} min"


def share_fraction(gpu_equivalents: float) -> str:
    """A time-sliced share as a small fraction (0.25 → ``1/4``)."""
    frac = Fraction(gpu_equivalents).limit_denominator(64)
    return f"{frac.numerator}/{frac.denominator}" if frac else "0"


def alloc_text(a: Allocation | None, *, vllm: bool = False) -> str:
    """What one replica holds, in the fewest words; replicas and the vLLM memory fraction appended."""
    if a is None:
        return DASH
    if a.replicas == 0:
        return "scale to zero"
    text = _mechanism(a)
    if a.replicas != 1:
        text += f", {a.replicas} replicas"
    if vllm and a.vllm is not None and a.vllm.gpu_memory_utilization is not None:
        text += f", vLLM util {a.vllm.gpu_memory_utilization:.2f}"
    return text


def _mechanism(a: Allocation) -> str:
    model = a.gpu_model or (f"unknown GPU ({a.gpu_product})" if a.gpu_product else "unknown GPU")
    match a.sharing:
        case Sharing.EXCLUSIVE:
            return f"{a.gpus}× {model}"
        case Sharing.MIG:
            count = f"{a.mig_count}× " if a.mig_count > 1 else ""
            return f"{count}mig {a.mig_profile or '?'}"
        case Sharing.TIME_SLICING:
            return f"ts {share_fraction(a.gpu_equivalents)}"
        case Sharing.MPS:
            pct = f" {a.mps_active_thread_pct:g}%" if a.mps_active_thread_pct is not None else ""
            return f"mps{pct}"
        case Sharing.HAMI:
            mem = f" {a.hami_gpumem_mib:,.0f} MiB" if a.hami_gpumem_mib is not None else ""
            cores = f" {a.hami_gpucores_pct:g}%" if a.hami_gpucores_pct is not None else ""
            return f"hami{mem}{cores}"
        case Sharing.KAI:
            frac = f" {a.kai_gpu_fraction:g}" if a.kai_gpu_fraction is not None else ""
            return f"kai{frac} gpu"
        case Sharing.VOLCANO:
            mem = f" {a.volcano_vgpu_memory_mib:,.0f} MiB" if a.volcano_vgpu_memory_mib is not None else ""
            cores = f" {a.volcano_vgpu_cores_pct:g}%" if a.volcano_vgpu_cores_pct is not None else ""
            return f"{max(a.gpus, 1)}× vgpu{mem}{cores}"
        case Sharing.RUNAI:
            frac = f" {a.runai_gpu_fraction:g}" if a.runai_gpu_fraction is not None else ""
            return f"runai{frac} gpu (report-only)"
    return "no GPU"


def short_reason(rec: Recommendation) -> str:
    """Why there is no recommendation, in one line: the first reason that says so."""
    why = next((r for r in rec.reasons if r.startswith(NO_REC)), rec.reasons[0] if rec.reasons else "")
    return why.removeprefix(NO_REC) or "no reason given"


def recommended_text(rec: Recommendation) -> str:
    if rec.recommended is None:
        return NO_REC + short_reason(rec)
    return alloc_text(rec.recommended, vllm=True)


def autoscaler_text(rec: Recommendation) -> str:
    """``replicas: HPA/llama`` or ``replicas: ScaledObject/llama`` where an autoscaler owns the replica count (its
    min/max are the place for replica advice, not ``spec.replicas``), else ''."""
    owner = rec.workload.autoscaler
    return f"replicas: {owner.replace('HorizontalPodAutoscaler/', 'HPA/')}" if owner else ""


def observed_p95(snapshot: Snapshot | None, rec: Recommendation, metric: str = FB_USED_MIB) -> float | None:
    """p95 of a workload's series in the snapshot: what it used when no need was estimated."""
    series = snapshot.series(metric, rec.ref) if snapshot is not None else None
    if series is None:
        return None
    values = series.to_numpy(dtype="float64")
    values = values[np.isfinite(values)]
    return float(np.quantile(values, 0.95)) if values.size else None


def used_text(rec: Recommendation, snapshot: Snapshot | None) -> str:
    """Memory need target / device memory (MiB), then compute need as a share of one GPU."""
    device = finite(rec.workload.allocation.device_memory_mib)
    of = f"/{device:,.0f} MiB" if device is not None else " MiB"
    if rec.memory_need_mib is not None:
        mem = f"{rec.memory_need_mib.target:,.0f}{of}"
    else:
        seen = observed_p95(snapshot, rec)
        mem = f"{seen:,.0f}{of} (p95 seen)" if seen is not None else DASH
    comp = f", {rec.compute_need_frac.target:.0%} GPU" if rec.compute_need_frac is not None else ""
    return mem + comp


def num(x: float | None, fmt: str = ".2f") -> str:
    value = finite(x)
    return DASH if value is None else format(value, fmt)


def gpus_text(rec: Recommendation) -> str:
    return f"{rec.gpus_held:.2f} → {rec.gpus_needed:.2f}"


def money(usd: float | None, per: str = "/mo") -> str:
    """``$1,606/mo``; negative when the change costs more; ``–`` when unknown."""
    value = finite(usd)
    if value is None:
        return DASH
    sign = "-" if value < -0.005 else ""
    return f"{sign}${abs(value):,.0f}{per}"


def percent(frac: float | None) -> str:
    value = finite(frac)
    return DASH if value is None else f"{value:.0%}"


def confidence_text(rec: Recommendation, mark: str = " (provisional)") -> str:
    """The confidence, followed by ``mark`` where the recommendation is provisional; a dash without one."""
    if not rec.actionable:
        return DASH
    return percent(rec.confidence) + (mark if rec.provisional else "")


def scaling_line(rec: Recommendation) -> str | None:
    """``ns/Kind/name autoscaling: 4 replicas at peak (min 3, max 42), threshold 2 req/s per replica, ...``: the
    scaling plan's numbers (on the recommended shape) as every text format prints them, or None without a plan.
    The same words everywhere, so a reader or a script finds them by the workload's key."""
    p = rec.scaling
    if p is None:
        return None
    shape = f"; on {p.shape}" + (", capacity estimated from today's shape" if p.capacity_estimated else "") \
        if p.shape else "; on today's shape"
    waiting = f", {p.waiting_per_replica:g} waiting per replica" if p.waiting_per_replica is not None else ""
    n = p.recommended_replicas
    return (f"{rec.ref.key} autoscaling: {n} replica{'' if n == 1 else 's'} at peak (min {p.min_replicas}, max "
            f"{p.max_replicas}), threshold {p.target_per_replica:g} req/s per replica{waiting}{shape}")


def fleet_line(plan: Plan) -> str:
    """One sentence with the fleet totals: held vs needed, packed whole GPUs, money per month."""
    s = plan.summary
    packed = f" (packed: {s.gpus_needed_packed} whole GPUs)" if s.gpus_needed_packed is not None else ""
    return (f"Fleet: {s.workloads} workloads, {s.with_recommendation} with a recommendation · "
            f"GPUs held {s.gpus_held:.2f} → needed {s.gpus_needed:.2f}{packed} · "
            f"saves {money(s.monthly_savings_usd, '/month')}{autoscaled_text(s)}")


def autoscaled_text(s: Summary) -> str:
    """' · autoscaling today's replicas: 5,964 → ≥ 5,210 GPU-h ...; right-sized too: ≥ 4,560 ...', or '' when no
    scaling plan has a mean (a lower bound: the plans' means assume a perfect forecast)."""
    if s.gpu_hours_autoscaled is None:
        return ""
    both = "" if s.gpu_hours_right_sized_autoscaled is None else (
        f"; right-sized too: ≥ {s.gpu_hours_right_sized_autoscaled:,.0f} ({s.right_sized_autoscaled_workloads} "
        f"autoscaled on the recommended shape)")
    return (f" · autoscaling today's replicas: {s.gpu_hours_held:,.0f} → ≥ {s.gpu_hours_autoscaled:,.0f} GPU-h over "
            f"the window ({s.autoscaled_workloads} workload{'s' if s.autoscaled_workloads != 1 else ''}){both}")


def window_line(plan: Plan) -> str:
    span = (plan.window_end - plan.window_start).total_seconds()
    return (f"{human_utc(plan.window_start)} → {human_utc(plan.window_end)} "
            f"({duration(span)}, step {plan.step_s:g} s) · source {plan.source}")


def class_text(rec: Recommendation) -> str:
    """``real-time 91%``; an annotation or a rule says so instead of a probability."""
    c = rec.classification
    if c is None:
        return DASH
    how = f"{c.confidence:.0%}" if c.source == "model" else f"({c.source})"
    return f"{c.workload_class.value} {how}"


def main_forecast(rec: Recommendation) -> Forecast | None:
    """The forecast a reader looks at first: requests/s, else tokens/s, else KV tokens."""
    by_metric = {f.metric: f for f in rec.forecasts}
    return next((by_metric[m] for m in DEMAND_METRICS if m in by_metric), None)


def forecast_text(rec: Recommendation) -> str:
    """``peak 14.2 requests/s (≤ 19.8)``: the forecast mean's peak and the widest band's peak."""
    f = main_forecast(rec)
    if f is None or f.frame.empty:
        return DASH
    peak, top = float(f.frame["mean"].max()), float(f.frame[upper_band(f.frame)].max())
    return f"peak {peak:,.3g} {LABELS.get(f.metric, f.metric)} (≤ {top:,.3g})"


def risk_text(rec: Recommendation) -> str:
    """``high: memory upper bound ... exceeds ...``: the level and why; the level alone when no reason was kept."""
    return f"{rec.risk}: {'; '.join(rec.risk_reasons)}" if rec.risk_reasons else rec.risk


MIG_DISABLED = "MIG disabled"


def mig_devices_text(devices: Mapping[str, int]) -> str:
    """One GPU's MIG devices as planned: ``1×4g.40gb + 1×2g.20gb``; ``MIG disabled`` when it has none."""
    return " + ".join(f"{n}×{name}" for name, n in devices.items()) or MIG_DISABLED


def gpu_runs(node: NodeMigPlan) -> list[tuple[str, str]]:
    """(GPU indices, MIG devices) for each run of neighbouring GPUs with the same layout, in index order:
    ``("0", "1×3g.40gb")``, ``("1–7", "MIG disabled")``, so an 8-GPU node reads in a few lines."""
    runs: list[tuple[int, int, str]] = []
    for i, devices in enumerate(node.layouts):
        text = mig_devices_text(devices)
        if runs and runs[-1][2] == text:
            runs[-1] = (runs[-1][0], i, text)
        else:
            runs.append((i, i, text))
    return [(str(a) if a == b else f"{a}–{b}", text) for a, b, text in runs]


def gpu_lines(node: NodeMigPlan) -> list[str]:
    """``GPU 0: 1×3g.40gb``, ``GPUs 1–7: MIG disabled``: :func:`gpu_runs` as lines."""
    return [f"GPU{'s' if '–' in gpus else ''} {gpus}: {text}" for gpus, text in gpu_runs(node)]


def mig_label(node: NodeMigPlan) -> str:
    """The node label that selects the node's mig-parted config: ``nvidia.com/mig.config=<name>``."""
    return f"{MIG_CONFIG_LABEL}={node.config_name}"


def reconfigured_text(node: NodeMigPlan) -> str:
    return f"{node.reconfigured_gpus} of {node.gpus_total} GPUs"


def _plain(value: Any) -> Any:
    """Mappings and sequences as dicts and lists, so YAML writes them without Python tags."""
    return json.loads(json.dumps(value))


def mig_parted_yaml(plan: Plan) -> str:
    """The plan's mig-parted config as YAML, after comments naming the label each node takes; '' without one."""
    if not plan.mig_parted_config:
        return ""
    import yaml  # only the formats that show the config pay for it

    labels = [f"#   {' '.join(n.node.split())}: {mig_label(n)}" for n in plan.mig_nodes]  # one line each
    head = ["# mig-parted config (version v1) for the GPU Operator's MIG manager: add it to the manager's config,",
            "# then label each node with the config it takes (a name not defined below is one it keeps):", *labels]
    body = yaml.safe_dump(_plain(plan.mig_parted_config), sort_keys=False, default_flow_style=False,
                          allow_unicode=True)
    return "\n".join(head) + "\n" + body
