"""``csv``: one flat row per workload, for spreadsheets and ``join``/``awk`` pipelines.

Columns hold one value each with the unit in the name, in the same rounding as the JSON contract;
absent values are empty cells. Text cells that a spreadsheet would run as a formula (starting with
``=``, ``+``, ``-``, ``@``, tab or CR) get a leading ``'``: names and reasons are user data.

The CSV stays one table (``csv.DictReader`` reads every row as a workload), so the per-node MIG plan goes
in files beside it (:func:`mig_files`): ``<out>.mig-nodes.csv``, one row per node and GPU, and
``<out>.mig-parted.yaml``, the mig-parted config, and ``<out>.device-plugin.yaml``, the device plugin's
ConfigMap of named configs; the CLI writes them when ``-o`` is given.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from io import StringIO
from typing import Any

from recommender.core.inventory import Allocation
from recommender.core.plan import NodeMigPlan, Plan, Recommendation
from recommender.core.usage import Snapshot
from recommender.outputs import devplugintext as dpt
from recommender.outputs import jsondoc as j
from recommender.outputs import text as t
from recommender.outputs.registry import register_companions, register_formatter

_ALLOC_FIELDS: tuple[tuple[str, Callable[[Allocation], Any]], ...] = (
    ("sharing", lambda a: a.sharing.value),
    ("gpus", lambda a: a.gpus),
    ("mig_profile", lambda a: a.mig_profile),
    ("mig_count", lambda a: a.mig_count),
    ("gpu_equivalents", lambda a: j.frac(a.gpu_equivalents)),
    ("replicas", lambda a: a.replicas),
    ("gpu_model", lambda a: a.gpu_model),
    ("gpu_product", lambda a: a.gpu_product),
    ("device_memory_mib", lambda a: j.mib(a.device_memory_mib)),
    ("vllm_gpu_memory_utilization", lambda a: j.frac(a.vllm.gpu_memory_utilization) if a.vllm else None),
)
_BOUND = ("lower", "target", "upper")
_SCALING = ("min_replicas", "max_replicas", "peak_replicas", "mean_replicas", "mean_replicas_right_sized",
            "target_per_replica", "capacity_estimated")
COLUMNS = (
    "namespace", "kind", "name",
    *(f"current_{n}" for n, _ in _ALLOC_FIELDS),
    *(f"recommended_{n}" for n, _ in _ALLOC_FIELDS),
    *(f"memory_need_{b}_mib" for b in _BOUND),
    *(f"compute_need_{b}_frac" for b in _BOUND),
    "gpus_held", "gpus_needed", "monthly_savings_usd", "confidence", "risk", "risk_reasons", "history_s",
    "provisional",
    "class", "class_confidence", "class_source",
    "forecast_metric", "forecast_model", "forecast_mean", "forecast_peak", "forecast_peak_upper",
    *(f"scaling_{n}" for n in _SCALING),
    "autoscaler",
    "reasons",
)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _text(value: str) -> str:
    """A user-supplied text cell made inert for spreadsheets (CSV injection)."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def _alloc(prefix: str, a: Allocation | None) -> dict[str, Any]:
    return {f"{prefix}_{n}": (get(a) if a is not None else None) for n, get in _ALLOC_FIELDS}


def _bound(prefix: str, unit: str, values: dict[str, Any] | None) -> dict[str, Any]:
    return {f"{prefix}_{b}_{unit}": (values[b] if values else None) for b in _BOUND}


def row(rec: Recommendation) -> dict[str, Any]:
    ref = rec.ref
    doc = j.workload(rec)
    return {
        "namespace": _text(ref.namespace), "kind": _text(ref.kind), "name": _text(ref.name),
        **_alloc("current", rec.workload.allocation),
        **_alloc("recommended", rec.recommended),
        **_bound("memory_need", "mib", doc["memory_need_mib"]),
        **_bound("compute_need", "frac", doc["compute_need_frac"]),
        **{k: doc[k] for k in ("gpus_held", "gpus_needed", "monthly_savings_usd", "confidence", "risk",
                               "history_s")},
        "risk_reasons": _text("; ".join(rec.risk_reasons)),
        "provisional": "true" if rec.provisional else "false",  # as JSON writes it
        **_demand(doc),
        **{f"scaling_{n}": (doc["scaling"][n] if doc["scaling"] else None) for n in _SCALING},
        "autoscaler": _text(rec.workload.autoscaler) if rec.workload.autoscaler else None,
        "reasons": _text("; ".join(rec.reasons)),
    }


def _demand(doc: dict[str, Any]) -> dict[str, Any]:
    """The class, and the first demand forecast (requests/s, else tokens/s, else KV tokens)."""
    c = doc["class"] or {}
    f = doc["forecasts"][0] if doc["forecasts"] else {}
    return {"class": c.get("name"), "class_confidence": c.get("confidence"), "class_source": c.get("source"),
            "forecast_metric": f.get("metric"), "forecast_model": f.get("model"), "forecast_mean": f.get("mean"),
            "forecast_peak": f.get("peak"), "forecast_peak_upper": f.get("peak_upper")}


@register_formatter("csv")
def render_csv(plan: Plan, snapshot: Snapshot | None = None) -> str:
    """A header row, then one row per workload in the plan's order.

    Lines end in ``\\n`` rather than RFC 4180's ``\\r\\n``: the file is read by shell tools as often as
    by spreadsheets, and every CSV reader accepts both.
    """
    return _write(COLUMNS, [row(rec) for rec in plan.recommendations])



MIG_COLUMNS = ("node", "gpu_model", "gpus_total", "gpu", "mig_enabled", "mig_devices", "config_name", "label",
               "reconfigured_gpus", "workloads")


def _mig_rows(n: NodeMigPlan) -> list[dict[str, Any]]:
    """One row per GPU of the node; ``mig_devices`` is ``profile:count`` pairs joined by ``;``."""
    return [{"node": _text(n.node), "gpu_model": n.gpu_model, "gpus_total": n.gpus_total, "gpu": i,
             "mig_enabled": "true" if devices else "false",
             "mig_devices": ";".join(f"{name}:{count}" for name, count in devices.items()),
             "config_name": n.config_name, "label": t.mig_label(n), "reconfigured_gpus": n.reconfigured_gpus,
             "workloads": _text(" ".join(n.workloads))} for i, devices in enumerate(n.layouts)]


def _write(columns: tuple[str, ...], rows: list[dict[str, Any]]) -> str:
    buf = StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return buf.getvalue()


@register_companions("csv")
def mig_files(plan: Plan) -> dict[str, str]:
    """The node plans as files beside the CSV, by suffix: MIG's ``.mig-nodes.csv`` and ``.mig-parted.yaml``, the
    device plugin's ``.device-plugin.yaml`` (its ConfigMap, where a config is new); {} without either."""
    out = {}
    if plan.mig_nodes:
        nodes = _write(MIG_COLUMNS, [r for n in plan.mig_nodes for r in _mig_rows(n)])
        out = {".mig-nodes.csv": nodes, ".mig-parted.yaml": t.mig_parted_yaml(plan)}
    config = dpt.configmap_yaml(plan)
    return out | ({".device-plugin.yaml": config} if config else {})
