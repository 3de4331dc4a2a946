"""``markdown``: a report for pull requests, issues and wikis (GitHub-flavoured Markdown).

A summary, one table row per workload (risk included), the reasons per workload with why its risk, the
per-node MIG plan (layout per GPU, the node label, the mig-parted config as YAML), then warnings. Workload names and
reasons are user data: every Markdown and HTML special character in them is escaped, so a name like
``a<b>|c`` neither opens a tag nor splits a table cell.
"""

from __future__ import annotations

import re

from recommender.core.annotations import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL
from recommender.core.plan import NodeMigPlan, Plan, Recommendation
from recommender.core.usage import Snapshot
from recommender.outputs import devplugintext as dpt
from recommender.outputs import text as t
from recommender.outputs.registry import register_formatter

_INLINE = re.compile(r"([\\`*_\[\]|~$])")  # emphasis, code, links, cells, strikethrough, GitHub math
_BLOCK_START = re.compile(r"^(\d*)([#+=.)-])")  # a heading, list or ordered list at the line's start
_HEADER = ("namespace", "kind/name", "class", "current", "used", "recommended", "demand forecast",
           "GPUs held→needed", "$/month", "confidence", "risk")


def md(value: str) -> str:
    """Inline text safe in a GFM table cell or list item: HTML entities, then escaped punctuation.

    Only characters that change meaning inline are escaped (and block markers at the very start),
    so the raw Markdown stays readable.
    """
    text = " ".join(value.split())  # a newline would end the table row
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _BLOCK_START.sub(r"\1\\\2", _INLINE.sub(r"\\\1", text))


def _summary(plan: Plan) -> list[str]:
    s = plan.summary
    packed = f"{s.gpus_needed_packed}" if s.gpus_needed_packed is not None else "not computed"
    return [
        f"- **Window**: {md(t.window_line(plan))}",
        f"- **Workloads**: {s.workloads} ({s.with_recommendation} with a recommendation)",
        f"- **GPUs held → needed**: {s.gpus_held:.2f} → {s.gpus_needed:.2f} GPU-equivalents "
        f"(whole GPUs after packing: {packed})",
        f"- **GPU-hours over the window**: {s.gpu_hours_held:,.1f} held → {s.gpu_hours_needed:,.1f} needed",
        *([f"- **Autoscaling today's replicas** ({s.autoscaled_workloads} scaling plans): "
           f"{s.gpu_hours_held:,.1f} → at least {s.gpu_hours_autoscaled:,.1f} GPU-hours over the window "
           "(today's shapes: it does not add to right-sizing)"] if s.gpu_hours_autoscaled is not None else []),
        *([f"- **Right-sized and autoscaled** ({s.right_sized_autoscaled_workloads} scaling plans on the recommended "
           f"shape, the rest as needed): {s.gpu_hours_held:,.1f} → at least {s.gpu_hours_right_sized_autoscaled:,.1f} "
           "GPU-hours over the window (capacity per replica scaled by the compute it holds: an estimate)"]
          if s.gpu_hours_right_sized_autoscaled is not None else []),
        f"- **Savings**: {md(t.money(s.monthly_savings_usd, ' per month'))}",
    ]


def _row(rec: Recommendation, snapshot: Snapshot | None) -> str:
    ref = rec.ref
    cells = (ref.namespace, f"{ref.kind}/{ref.name}", t.class_text(rec), t.alloc_text(rec.workload.allocation),
             t.used_text(rec, snapshot), "; ".join(x for x in (t.recommended_text(rec), t.autoscaler_text(rec)) if x),
             t.forecast_text(rec), t.gpus_text(rec),
             t.money(rec.monthly_savings_usd, ""), t.confidence_text(rec), rec.risk)
    return "| " + " | ".join(md(c) for c in cells) + " |"


def _table(plan: Plan, snapshot: Snapshot | None) -> list[str]:
    align = ["---"] * 7 + ["---:"] * 3 + ["---"]
    return ["| " + " | ".join(_HEADER) + " |", "| " + " | ".join(align) + " |",
            *(_row(r, snapshot) for r in plan.recommendations)]


def _reasons(plan: Plan) -> list[str]:
    lines: list[str] = []
    for rec in plan.recommendations:
        lines.append(f"- **{md(rec.ref.key)}** (risk {md(t.risk_text(rec))})")
        lines.extend(f"  - {md(reason)}" for reason in rec.reasons)
    return lines


def code(value: str) -> str:
    """``value`` as an inline code span (to copy as is), or escaped text when it holds a backtick or newline."""
    return f"`{value}`" if "`" not in value and "\n" not in value else md(value)


def fenced(info: str, body: str) -> list[str]:
    """A fenced code block, its fence longer than any run of backticks in ``body``."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", body)), default=0))
    return [f"{fence}{info}", body.rstrip("\n"), fence]


def _mig_node(node: NodeMigPlan) -> list[str]:
    return [
        f"### Node {md(node.node)}", "",
        f"- **Node label to set**: {code(t.mig_label(node))}",
        f"- **GPUs**: {node.gpus_total}× {md(node.gpu_model)}; reconfigured: {md(t.reconfigured_text(node))}",
        f"- **Workloads**: {', '.join(md(w) for w in node.workloads) or t.DASH}", "",
        "| GPU | MIG devices |", "| ---: | --- |",
        *(f"| {gpus} | {md(devices)} |" for gpus, devices in t.gpu_runs(node)), "",
        *(f"- {md(reason)}" for reason in node.reasons),
    ]


def _mig(plan: Plan) -> list[list[str]]:
    """The per-node MIG plan and the mig-parted config; nothing when no workload gets a MIG slice."""
    if not plan.mig_nodes:
        return []
    intro = [f"Set each node's {code(MIG_CONFIG_LABEL)} label to its config: the GPU Operator's MIG manager then "
             "applies the layout below from the mig-parted config (each reconfigured GPU evicts its pods)."]
    config = ["### mig-parted config", "", *fenced("yaml", t.mig_parted_yaml(plan))] if plan.mig_parted_config else []
    return [["## MIG plan per node"], intro, *(_mig_node(n) for n in plan.mig_nodes), *([config] if config else [])]


def _device_plugin(plan: Plan) -> list[list[str]]:
    """Each node's device-plugin config today and to select, then the ConfigMap; nothing without a plan."""
    dp = plan.device_plugin
    if dp is None:
        return []
    rows = [f"| {md(n.node)} | {n.gpus_total}× {md(n.gpu_model)} | {md(n.current_config or t.DASH)} | "
            f"{md(dpt.change_text(n))} | {code(dpt.label(n))} | {', '.join(md(w) for w in n.workloads) or t.DASH} |"
            for n in dp.nodes]
    table = ["| Node | GPUs | Config today | Sharing | Node label to set | Workloads |",
             "| --- | --- | --- | --- | --- | --- |", *rows]
    why = [f"- {md(n.node)}: {md(r)}" for n in dp.nodes for r in n.reasons]
    config = dpt.configmap_yaml(plan)
    return [["## Device-plugin sharing per node"],
            [f"Set each node's {code(DEVICE_PLUGIN_CONFIG_LABEL)} label to its config from the device plugin's "
             f"ConfigMap {code(dp.namespace + '/' + dp.configmap)}."], table, why,
            *([["### Device-plugin ConfigMap", "", *fenced("yaml", config)]] if config else [])]


@register_formatter("markdown")
def render_markdown(plan: Plan, snapshot: Snapshot | None = None) -> str:
    """Summary, table, reasons, warnings; sections separated by blank lines, newline-terminated."""
    parts = [
        ["# GPU right-sizing report"],
        _summary(plan),
        ["## Workloads"],
        _table(plan, snapshot),
        ["_used_: memory need (target) / device memory per replica, compute need as a share of one GPU."],
        ["## Why"],
        _reasons(plan) or ["No workloads."],
        *_mig(plan),
        *_device_plugin(plan),
    ]
    scaling = [f"- {md(line)}" for r in plan.recommendations if (line := t.scaling_line(r))]
    if scaling:
        parts += [["## Autoscaling"], scaling]
    if plan.warnings:
        parts += [["## Warnings"], [f"- {md(w)}" for w in plan.warnings]]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"
