"""``json``: the plan as one versioned JSON object, the contract other tools build on.

The contract is documented field by field in ``JSON.md``; its typed form is
:mod:`recommender.outputs.docmodel`, which ``schema.json`` (JSON Schema 2020-12) is generated from.
Every key is always present (``null`` when unknown) so consumers never guess; numbers are rounded by
unit so reports diff cleanly; NaN and infinity become ``null`` (and ``allow_nan=False``
guarantees none slips through). Adding a field bumps the minor version; renaming or removing one,
or changing a unit, bumps the major version.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from recommender.analysis.forecast import upper_band
from recommender.core.advice import AutoscalerObjects
from recommender.core.annotations import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL
from recommender.core.inventory import Allocation, VllmArgs
from recommender.core.plan import (
    Bound,
    Classification,
    DevicePluginPlan,
    Forecast,
    NodeMigPlan,
    Plan,
    Recommendation,
    ScalingPlan,
    Summary,
)
from recommender.core.usage import Snapshot
from recommender.outputs import text as t
from recommender.outputs.docmodel import Report
from recommender.outputs.registry import register_formatter

SCHEMA_VERSION = "2.1"  # 1.1: class and forecasts per workload; 1.2: mechanism, apply, scaling, MIG node plans;
# 1.3: replicas and GPU-hours under the scaling plans (scaling.mean_replicas, summary.gpu_hours_autoscaled);
# 1.4: a second trigger on requests waiting (scaling.waiting_per_replica); 1.5: replicas and GPU-hours on the
# recommended shape (scaling.mean_replicas_right_sized, summary.gpu_hours_right_sized_autoscaled); 1.6: what the
# bounds were sized on (scaling.demand_source); 1.7: the autoscaler that owns the replicas (autoscaler); 2.0: scaling
# on the recommended shape (scaling.shape, capacity_estimated, capacity_scale, basis_capacity), its peak count
# renamed scaling.peak_replicas (was recommended_replicas, read beside recommended.replicas), thresholds to 4
# significant digits, scaling.hpa, autoscaler_prometheus (the KEDA triggers' serverAddress), provisional (a
# recommendation made on short history), risk_reasons (why the risk is what it is); 2.1: device_plugin (the device
# plugin's named configs per node pool and the label per node)


def _rounder(digits: int) -> Callable[[float | None], float | None]:
    """Round to ``digits`` decimals; None for absent or non-finite; never ``-0.0``."""

    def r(x: float | None) -> float | None:
        value = t.finite(x)
        return None if value is None else round(value, digits) + 0.0

    return r


frac = _rounder(4)  # 0-1 shares, GPU-equivalents, confidence
mib = _rounder(1)  # MiB
usd = _rounder(2)  # dollars
secs = _rounder(1)  # seconds, hours
pct = _rounder(2)  # 0-100 percentages


def _vllm(v: VllmArgs | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {"model": v.model, "gpu_memory_utilization": frac(v.gpu_memory_utilization),
            "max_model_len": v.max_model_len, "max_num_seqs": v.max_num_seqs,
            "tensor_parallel_size": v.tensor_parallel_size}


def allocation(a: Allocation | None) -> dict[str, Any] | None:
    """One replica's allocation; ``total_gpu_equivalents`` covers all replicas."""
    if a is None:
        return None
    return {
        "text": t.alloc_text(a, vllm=True),
        "sharing": a.sharing.value,
        "gpus": a.gpus,
        "mig_profile": a.mig_profile,
        "mig_count": a.mig_count,
        "gpu_equivalents": frac(a.gpu_equivalents),
        "replicas": a.replicas,
        "total_gpu_equivalents": frac(a.total_gpu_equivalents),
        "gpu_model": a.gpu_model,
        "gpu_product": a.gpu_product,
        "device_memory_mib": mib(a.device_memory_mib),
        "mps_active_thread_pct": pct(a.mps_active_thread_pct),
        "mps_pinned_mem_mib": mib(a.mps_pinned_mem_mib),
        "hami_gpumem_mib": mib(a.hami_gpumem_mib),
        "hami_gpucores_pct": pct(a.hami_gpucores_pct),
        "kai_gpu_fraction": frac(a.kai_gpu_fraction),
        "volcano_vgpu_memory_mib": mib(a.volcano_vgpu_memory_mib),
        "volcano_vgpu_cores_pct": pct(a.volcano_vgpu_cores_pct),
        "runai_gpu_fraction": frac(a.runai_gpu_fraction),
        "vllm": _vllm(a.vllm),
    }


def _bound(b: Bound | None, r: Callable[[float | None], float | None]) -> dict[str, float | None] | None:
    """A bound with all three figures, or None: a bound missing one of them is no bound."""
    values = {"lower": r(b.lower), "target": r(b.target), "upper": r(b.upper)} if b is not None else {}
    return values if values and None not in values.values() else None


MAX_FORECAST_POINTS = 48  # per forecast in the JSON: every k-th step; `rightsizer forecast` writes them all
demand = _rounder(3)  # demand units (requests/s, tokens/s, tokens)


def _class(c: Classification | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"name": c.workload_class.value, "confidence": frac(c.confidence), "source": c.source,
            "evidence": list(c.evidence)}


def forecast(f: Forecast) -> dict[str, Any]:
    """One demand forecast: its model, what the backtest said, a summary and (sampled) points."""
    frame = f.frame
    every = max(1, math.ceil(len(frame) / MAX_FORECAST_POINTS))
    step_s = (frame.index[1] - frame.index[0]).total_seconds() if len(frame) > 1 else None
    points = _points(frame.iloc[::every])
    upper = upper_band(frame)
    return {
        "metric": f.metric,
        "model": f.model,
        "reasons": list(f.reasons),
        "backtest_smape": frac(f.backtest_smape),
        "backtest_mase": frac(f.backtest_mase),
        "horizon_s": secs(step_s * len(frame)) if step_s else None,
        "mean": demand(float(frame["mean"].mean())) if len(frame) else None,
        "peak": demand(float(frame["mean"].max())) if len(frame) else None,
        "peak_upper": demand(float(frame[upper].max())) if len(frame) else None,
        "points_step_s": secs(step_s * every) if step_s else None,
        "points": points,
    }


def _points(sampled: pd.DataFrame) -> list[dict[str, Any]]:
    """Each row as ``{"timestamp": ISO-8601 UTC to the second (a naive index is UTC), column: demand(value)}``,
    formatted a column at a time (numpy's datetime strings, one float conversion per frame) rather than a row of
    Timestamps and a dict at a time: the same text as :func:`recommender.outputs.text.iso_utc`."""
    index = pd.DatetimeIndex(sampled.index)
    utc = index.tz_convert(None) if index.tz is not None else index
    stamps = [f"{s}Z" for s in np.datetime_as_string(utc.to_numpy(), unit="s")]
    names = [str(c) for c in sampled.columns]
    rows = sampled.to_numpy(dtype=np.float64).tolist()
    return [{"timestamp": ts, **{c: demand(v) for c, v in zip(names, row, strict=True)}}
            for ts, row in zip(stamps, rows, strict=True)]


def workload(rec: Recommendation) -> dict[str, Any]:
    ref = rec.ref
    return {
        "namespace": ref.namespace,
        "name": ref.name,
        "kind": ref.kind,
        "current": allocation(rec.workload.allocation),
        "recommended": allocation(rec.recommended),
        "reasons": list(rec.reasons),
        "confidence": frac(rec.confidence),
        "provisional": rec.provisional,
        "memory_need_mib": _bound(rec.memory_need_mib, mib),
        "compute_need_frac": _bound(rec.compute_need_frac, frac),
        "gpus_held": frac(rec.gpus_held),
        "gpus_needed": frac(rec.gpus_needed),
        "monthly_savings_usd": usd(rec.monthly_savings_usd),
        "risk": rec.risk,
        "risk_reasons": list(rec.risk_reasons),
        "history_s": secs(rec.history_s),
        "class": _class(rec.classification),
        "forecasts": [forecast(f) for f in rec.forecasts],
        "mechanism": rec.mechanism,
        "apply": dict(rec.advice.apply) if rec.advice.apply is not None else None,
        "scaling": scaling(rec.scaling, rec.advice.autoscaler),
        "autoscaler": rec.workload.autoscaler,
    }


def scaling(p: ScalingPlan | None, objects: AutoscalerObjects | None) -> dict[str, Any] | None:
    """Replica bounds on the recommended shape, the KEDA ScaledObject spec fragment and the HPA (External metric)
    that carry them (``objects``, made with the plan: recommender.pipeline.advice). Numbers are the plan's:
    printed, never recomputed."""
    if p is None:
        return None
    return {
        "metric": p.metric,
        "shape": p.shape,
        "per_replica_capacity": demand(p.per_replica_capacity),
        "capacity_source": p.capacity_source,
        "capacity_estimated": p.capacity_estimated,
        "capacity_scale": frac(p.capacity_scale),
        "basis_capacity": demand(p.measured_capacity),
        "target_per_replica": p.target_per_replica,
        "waiting_per_replica": p.waiting_per_replica,
        "headroom_frac": frac(p.headroom_frac),
        "min_replicas": p.min_replicas,
        "max_replicas": p.max_replicas,
        "peak_replicas": p.recommended_replicas,
        "demand_source": p.demand_source,
        "scale_to_zero": p.scale_to_zero,
        "activation_threshold": p.activation_threshold,
        "cooldown_s": p.cooldown_s,
        "cold_start_s": secs(p.cold_start_s),
        "mean_replicas": frac(p.mean_replicas),
        "mean_replicas_right_sized": frac(p.mean_replicas_right_sized),
        "reasons": list(p.reasons),
        "keda": dict(objects.keda) if objects is not None else None,
        "hpa": dict(objects.hpa) if objects is not None else None,
    }


def mig_node(n: NodeMigPlan) -> dict[str, Any]:
    return {"node": n.node, "gpu_model": n.gpu_model, "gpus_total": n.gpus_total,
            "layouts": [dict(d) for d in n.layouts], "workloads": list(n.workloads),
            "config_name": n.config_name, "label": {MIG_CONFIG_LABEL: n.config_name},
            "reconfigured_gpus": n.reconfigured_gpus, "reasons": list(n.reasons)}


def device_plugin(dp: DevicePluginPlan | None) -> dict[str, Any] | None:
    if dp is None:
        return None
    nodes = [{"node": n.node, "gpu_model": n.gpu_model, "gpus_total": n.gpus_total, "current_config": n.current_config,
              "current": n.current, "config_name": n.config_name, "label": {DEVICE_PLUGIN_CONFIG_LABEL: n.config_name},
              "strategy": n.strategy, "replicas": n.replicas, "workloads": list(n.workloads), "changed": n.changed,
              "reasons": list(n.reasons)} for n in dp.nodes]
    return {"configmap": {"namespace": dp.namespace, "name": dp.configmap},
            "configs": {k: dict(v) for k, v in dp.configs.items()}, "nodes": nodes}


def summary(s: Summary) -> dict[str, Any]:
    return {
        "gpus_held": frac(s.gpus_held),
        "gpus_needed": frac(s.gpus_needed),
        "gpus_needed_packed": s.gpus_needed_packed,
        "workloads": s.workloads,
        "with_recommendation": s.with_recommendation,
        "monthly_savings_usd": usd(s.monthly_savings_usd),
        "gpu_hours_held": secs(s.gpu_hours_held),
        "gpu_hours_needed": secs(s.gpu_hours_needed),
        "gpu_hours_autoscaled": secs(s.gpu_hours_autoscaled),
        "autoscaled_workloads": s.autoscaled_workloads,
        "gpu_hours_right_sized_autoscaled": secs(s.gpu_hours_right_sized_autoscaled),
        "right_sized_autoscaled_workloads": s.right_sized_autoscaled_workloads,
    }


def document(plan: Plan) -> dict[str, Any]:
    """The contract as plain Python data (what :func:`render_json` serialises), checked against the typed
    model that ``schema.json`` is generated from: a key or value the model does not allow is an error here."""
    return _plain(Report.model_validate(_raw(plan)))


def _plain(report: Report) -> dict[str, Any]:
    """A validated report as plain Python data, under its wire names."""
    return report.model_dump(mode="json", by_alias=True)


def _dumps(doc: dict[str, Any]) -> str:
    """``json.dumps``' text of a document: two-space indented, UTF-8 as is, no NaN, newline-terminated."""
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _raw(plan: Plan) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": t.iso_utc(plan.generated_at),
        "window": {"start": t.iso_utc(plan.window_start), "end": t.iso_utc(plan.window_end),
                   "step_s": secs(plan.step_s)},
        "source": plan.source,
        "summary": summary(plan.summary),
        "warnings": list(plan.warnings),
        "workloads": [workload(r) for r in plan.recommendations],
        "mig_nodes": [mig_node(n) for n in plan.mig_nodes],
        "mig_parted_config": dict(plan.mig_parted_config) or None,
        "autoscaler_prometheus": {"url": plan.autoscaler_prometheus.url, "source": plan.autoscaler_prometheus.source,
                                  "needs_auth": plan.autoscaler_prometheus.needs_auth},
        "device_plugin": device_plugin(plan.device_plugin),
    }


# Where pydantic's serializer and ``json.dumps`` write the same value differently: floats under 1e-4 in magnitude
# (Python writes ``1e-05``, ``2.5e-07``; pydantic ``0.00001``, ``2.5e-7``). A match (also one inside a string: harmless)
# sends the document through ``json.dumps`` instead. Two searches with a literal start (one alternation scans the
# 10 MB document of 2,000 workloads ~20 times slower).
_EXPONENT = re.compile(r"e-[0-9]")  # a float written as 1.5e-7 when its mantissa's last digit precedes it
_SMALL = re.compile(r"0\.0000[0-9]")  # 1e-05 written as 0.00001


def _written_differently(text: str) -> bool:
    """Whether pydantic's ``text`` may hold a float that ``json.dumps`` writes otherwise (false alarms allowed)."""
    return any(m.start() > 0 and text[m.start() - 1].isdigit() for m in _EXPONENT.finditer(text)) or bool(
        _SMALL.search(text))


def reference_json(plan: Plan) -> str:
    """:func:`render_json`'s bytes the slow way (``json.dumps`` of :func:`document`): what it must equal."""
    return _dumps(document(plan))


@register_formatter("json")
def render_json(plan: Plan, snapshot: Snapshot | None = None) -> str:
    """One JSON object, two-space indented, UTF-8 as is (names stay readable), newline-terminated.

    Validated once and serialised by pydantic (no second pass through Python dicts); byte-identical to
    :func:`reference_json`, which it falls back to where a float would be written differently."""
    model = Report.model_validate(_raw(plan))
    text = model.model_dump_json(indent=2, by_alias=True)
    if _written_differently(text):
        return _dumps(_plain(model))
    return text + "\n"
