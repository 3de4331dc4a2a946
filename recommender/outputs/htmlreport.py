"""``html``: one self-contained page that opens offline and that a person can read top to bottom.

Header (window, source) → fleet cards (GPUs held vs needed, packed whole GPUs, savings) → warnings →
a bar chart of GPUs held vs needed per namespace → a table of every workload (risk and why) → the MIG
plan per node (layout per GPU, the node label, the mig-parted config) → a section per workload, with
its usage chart, for the top ``top_n`` by GPUs saved (charts are what make a page heavy; the table
still lists everyone).

Self-contained means: CSS inlined, charts as inline SVG, no JavaScript, no fonts or images fetched; a
Content-Security-Policy meta tag makes the browser refuse anything external should it ever creep in.
Every string that comes from the cluster (names, reasons, warnings) goes through ``html.escape``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from html import escape
from importlib.resources import files

from recommender.core.annotations import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL
from recommender.core.plan import NodeMigPlan, Plan, Recommendation
from recommender.core.usage import Snapshot
from recommender.outputs import charts
from recommender.outputs import devplugintext as dpt
from recommender.outputs import text as t
from recommender.outputs.forecastchart import forecast_chart
from recommender.outputs.jsondoc import SCHEMA_VERSION
from recommender.outputs.registry import register_formatter
from recommender.outputs.replicachart import replica_chart
from recommender.outputs.usagechart import usage_chart

TOP_N = 50
REPLICA_NOTE = ("a lower bound: each replica starts one cold start before its demand (a perfect forecast) and "
                "bursts within a step are averaged; the product's scaling holds more (see the replay in the README)")
MAX_NAMESPACES = 25
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def e(value: object) -> str:
    return escape(str(value), quote=True)


def top_workloads(plan: Plan, n: int) -> list[Recommendation]:
    """The ``n`` workloads that free the most GPU-equivalents (ties by namespace/kind/name)."""
    return sorted(plan.recommendations, key=lambda r: (-(r.gpus_held - r.gpus_needed), r.ref))[:max(n, 0)]


def _card(label: str, value: str, sub: str = "", cls: str = "") -> str:
    return (f'<div class="card"><div class="label">{e(label)}</div><div class="value {cls}">{e(value)}</div>'
            f'<div class="sub">{e(sub)}</div></div>')


def _savings_class(usd: float | None) -> str:
    value = t.finite(usd) or 0.0
    return "good" if value > 0.005 else "bad" if value < -0.005 else ""


def _cards(plan: Plan) -> str:
    s = plan.summary
    packed = str(s.gpus_needed_packed) if s.gpus_needed_packed is not None else t.DASH
    return '<section class="cards">' + "".join((
        _card("GPUs held", f"{s.gpus_held:.2f}", f"GPU-equivalents · {s.gpu_hours_held:,.0f} GPU-h in window"),
        _card("GPUs needed", f"{s.gpus_needed:.2f}", f"GPU-equivalents · {s.gpu_hours_needed:,.0f} GPU-h"),
        _card("Whole GPUs after packing", packed, "MIG slices packed into valid layouts"),
        *([_card("GPU-h autoscaled", f"≥ {s.gpu_hours_autoscaled:,.0f}",
                 f"today's replicas under {s.autoscaled_workloads} scaling plans · {s.gpu_hours_held:,.0f} held",
                 _savings_class(s.gpu_hours_held - s.gpu_hours_autoscaled))]
          if s.gpu_hours_autoscaled is not None else []),
        *([_card("GPU-h right-sized + autoscaled", f"≥ {s.gpu_hours_right_sized_autoscaled:,.0f}",
                 f"{s.right_sized_autoscaled_workloads} scaling plans on the recommended shape, the rest as needed",
                 _savings_class(s.gpu_hours_held - s.gpu_hours_right_sized_autoscaled))]
          if s.gpu_hours_right_sized_autoscaled is not None else []),
        _card("Savings / month", t.money(s.monthly_savings_usd, ""), "at the configured GPU-hour prices",
              _savings_class(s.monthly_savings_usd)),
        _card("Workloads", f"{s.with_recommendation} / {s.workloads}", "with a recommendation"),
    )) + "</section>"


def _warnings(plan: Plan) -> str:
    if not plan.warnings:
        return ""
    items = "".join(f"<li>{e(w)}</li>" for w in plan.warnings)
    return f'<section class="warnings"><h2>Warnings</h2><ul>{items}</ul></section>'


def _fleet(plan: Plan) -> str:
    """GPU-equivalents held vs needed per namespace, most held first; past 25 the rest are a sentence
    (one "other" bar would dwarf every namespace shown)."""
    held: dict[str, float] = defaultdict(float)
    needed: dict[str, float] = defaultdict(float)
    both: dict[str, float] = defaultdict(float)
    for r in plan.recommendations:
        held[r.ref.namespace] += r.gpus_held
        needed[r.ref.namespace] += r.gpus_needed
        both[r.ref.namespace] += r.gpus_right_sized_autoscaled_or_needed
    if not held:
        return '<p class="none">No workloads.</p>'
    names = sorted(held, key=lambda ns: (-held[ns], ns))
    shown, rest = names[:MAX_NAMESPACES], names[MAX_NAMESPACES:]
    with charts.chart_style("gpu-rightsizer-fleet"):
        scaled = [both[n] for n in shown] if plan.summary.gpu_hours_right_sized_autoscaled is not None else None
        fig = charts.fleet_figure(shown, [held[n] for n in shown], [needed[n] for n in shown], scaled)
        svg = charts.to_svg(fig, tight=True)
    note = (f'<p class="note">{len(rest):,} more namespaces hold {sum(held[n] for n in rest):,.2f} GPUs and need '
            f"{sum(needed[n] for n in rest):,.2f}.</p>" if rest else "")
    return f'<figure class="panel" aria-label="GPUs held vs needed per namespace">{svg}{note}</figure>'


# Ten columns that fit 1,280 px: the risk's why, the demand forecast's bands and the reasons stay one click
# away (the row's "why", the workload's section), never past the right edge where nobody scrolls
_COLUMNS = ("namespace", "kind/name", "class · forecast", "current", "used", "recommended", "risk",
            "GPUs held→needed", "$/month", "confidence", "why")
_NUMERIC = {"GPUs held→needed", "$/month", "confidence"}
_BREAK_AFTER = re.compile(r"([/\-._])")


def breakable(name: str) -> str:
    """``name`` escaped, with a line-break opportunity after each ``/ - . _`` (the CSS breaks nowhere else)."""
    return "".join(e(part) + ("<wbr>" if _BREAK_AFTER.fullmatch(part) else "")
                   for part in _BREAK_AFTER.split(name) if part)


def _row(rec: Recommendation, snapshot: Snapshot | None, anchor: str | None) -> str:
    ref = rec.ref
    name = breakable(f"{ref.kind}/{ref.name}")
    name = f'<a href="#{anchor}">{name}</a>' if anchor else name
    recommended = (e(t.recommended_text(rec)) if rec.actionable
                   else f'<span class="none">{e(t.recommended_text(rec))}</span>')
    recommended += _autoscaler(rec)
    why = "".join(f"<li>{e(x)}</li>" for x in (f"risk {t.risk_text(rec)}", *rec.reasons))
    cells = (
        f'<td class="name">{breakable(ref.namespace)}</td>', f'<td class="name">{name}</td>', _class_cell(rec),
        f'<td class="alloc">{e(t.alloc_text(rec.workload.allocation))}</td>',
        f"<td>{e(t.used_text(rec, snapshot))}</td>",
        f"<td>{recommended}</td>", f'<td class="risk">{_risk(rec)}</td>',
        f'<td class="num">{e(t.gpus_text(rec))}</td>',
        f'<td class="num {_savings_class(rec.monthly_savings_usd)}">{e(t.money(rec.monthly_savings_usd, ""))}</td>',
        f'<td class="num">{e(t.confidence_text(rec))}</td>',
        f"<td><details><summary>{_count(len(rec.reasons) + 1, 'reason')}</summary><ul>{why}</ul></details></td>",
    )
    return f'<tr data-workload="{e(ref.key)}">' + "".join(cells) + "</tr>"


def _class_cell(rec: Recommendation) -> str:
    """The class over the demand forecast's peak (its bands are charted in the workload's section)."""
    forecast = t.forecast_text(rec)
    under = f'<div class="sub">{e(forecast)}</div>' if forecast != t.DASH else ""
    return f"<td>{e(t.class_text(rec))}{under}</td>"


def _risk(rec: Recommendation) -> str:
    """The risk level, coloured; why is the first of the row's reasons and in the workload's facts."""
    return f'<span class="level risk-{e(rec.risk)}">{e(rec.risk)}</span>'


def _autoscaler(rec: Recommendation) -> str:
    """A line naming the autoscaler that owns the replicas, or '' where none does."""
    owner = t.autoscaler_text(rec)
    return f'<br><span class="autoscaler">{e(owner)}</span>' if owner else ""


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _table(plan: Plan, snapshot: Snapshot | None, anchors: dict[str, str]) -> str:
    head = "".join(f'<th class="num">{e(c)}</th>' if c in _NUMERIC else f"<th>{e(c)}</th>" for c in _COLUMNS)
    rows = "".join(_row(r, snapshot, anchors.get(r.ref.key)) for r in plan.recommendations)
    note = ("<p class=\"note\">used: memory need (target) / device memory per replica, compute need as a share "
            "of one GPU; “p95 seen” where no need was estimated.</p>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>{note}'


def _facts(rec: Recommendation) -> str:
    facts = (("GPUs held → needed", t.gpus_text(rec), ""),
             ("savings / month", t.money(rec.monthly_savings_usd, ""), _savings_class(rec.monthly_savings_usd)),
             ("confidence", t.confidence_text(rec), ""),
             ("risk", t.risk_text(rec), f"risk-{rec.risk}"), ("history", t.duration(rec.history_s), ""))
    return '<dl class="facts">' + "".join(
        f'<div><dt>{e(k)}</dt><dd class="{e(c)}">{e(v)}</dd></div>' for k, v, c in facts) + "</dl>"


def _section(rec: Recommendation, anchor: str, snapshot: Snapshot | None) -> str:
    """Current vs recommended, the facts, the reasons, and the usage chart of one workload."""
    ref = rec.ref
    current = e(t.alloc_text(rec.workload.allocation, vllm=True))
    recommended = e(t.recommended_text(rec)) + _autoscaler(rec)
    chart = usage_chart(rec, snapshot, f"gpu-rightsizer-{anchor}")
    figure = (f'<figure aria-label="usage over time">{chart.svg}</figure>' if chart.svg
              else f'<p class="none">{e(chart.notes[0])}</p>')
    notes = chart.notes if chart.svg else chart.notes[1:]
    notes_html = f'<ul class="chart-notes">{"".join(f"<li>{e(n)}</li>" for n in notes)}</ul>' if notes else ""
    reasons = "".join(f"<li>{e(r)}</li>" for r in rec.reasons)
    title = " / ".join(breakable(x) for x in (ref.namespace, ref.kind, ref.name))
    demand = _demand(rec, anchor, snapshot)
    return (f'<article class="workload" id="{anchor}"><h3>{title}</h3>'
            f'<div class="compare"><div class="box"><h4>Current</h4>{current}</div><div class="arrow">→</div>'
            f'<div class="box rec"><h4>Recommended</h4>{recommended}</div></div>'
            f'{_facts(rec)}<ul class="reasons">{reasons}</ul>{figure}{notes_html}{demand}</article>')


def _demand(rec: Recommendation, anchor: str, snapshot: Snapshot | None) -> str:
    """The workload's class with its evidence, and its demand forecasts as a chart with bands."""
    c = rec.classification
    evidence = "".join(f"<li>{e(x)}</li>" for x in c.evidence) if c else ""
    head = (f'<h4>Class: {e(t.class_text(rec))}</h4><ul class="reasons">{evidence}</ul>' if c else "")
    svg = forecast_chart(rec, snapshot, f"gpu-rightsizer-{anchor}-forecast")
    chart = (f'<h4>Demand forecast</h4><figure aria-label="demand forecast">{svg}</figure>' if svg
             else '<p class="none">No demand forecast (see the reasons).</p>' if c else "")
    replicas = replica_chart(rec, snapshot, f"gpu-rightsizer-{anchor}-replicas")
    scaled = (f'<h4>Replicas under the scaling plan</h4><figure aria-label="replicas under the scaling plan">'
              f'{replicas}</figure><ul class="chart-notes"><li>{e(REPLICA_NOTE)}</li></ul>' if replicas else "")
    return head + chart + scaled


def _sections(plan: Plan, snapshot: Snapshot | None, chosen: list[Recommendation], anchors: dict[str, str]) -> str:
    left_out = len(plan.recommendations) - len(chosen)
    note = (f'<p class="note">Sections and charts for the {len(chosen)} workloads that free the most GPUs; '
            f"{left_out:,} more are listed in the table above without charts.</p>" if left_out else "")
    return note + "".join(_section(r, anchors[r.ref.key], snapshot) for r in chosen)


def _mig_node(node: NodeMigPlan) -> str:
    rows = "".join(f'<tr data-gpus="{e(gpus)}"><td class="num">{e(gpus)}</td><td>{e(devices)}</td></tr>'
                   for gpus, devices in t.gpu_runs(node))
    workloads = ", ".join(e(w) for w in node.workloads) or e(t.DASH)
    reasons = "".join(f"<li>{e(r)}</li>" for r in node.reasons)
    return (f'<article class="node" data-node="{e(node.node)}"><h3>{e(node.node)}</h3>'
            f'<p class="meta">{node.gpus_total}× {e(node.gpu_model)} · reconfigured {e(t.reconfigured_text(node))}</p>'
            f'<p>Node label to set:<br><code>{e(t.mig_label(node))}</code></p>'
            f'<table class="gpus"><thead><tr><th class="num">GPU</th><th>MIG devices</th></tr></thead>'
            f"<tbody>{rows}</tbody></table><p>Workloads: {workloads}</p>"
            f'<details><summary>{_count(len(node.reasons), "reason")}</summary><ul>{reasons}</ul></details></article>')


def _mig(plan: Plan) -> str:
    """The per-node MIG plan and the mig-parted config; '' when no workload gets a MIG slice."""
    if not plan.mig_nodes:
        return ""
    intro = (f'<p class="note">Set each node\'s <code>{e(MIG_CONFIG_LABEL)}</code> label to its config: the GPU '
             "Operator's MIG manager then applies the layout from the mig-parted config below (each reconfigured GPU "
             "evicts its pods).</p>")
    config = (f'<h3 class="config">mig-parted config</h3><pre class="config"><code>{e(t.mig_parted_yaml(plan))}'
              "</code></pre>" if plan.mig_parted_config else "")
    nodes = "".join(_mig_node(n) for n in plan.mig_nodes)
    return (f'<h2>MIG plan per node</h2>\n<section class="mig-nodes">{intro}<div class="nodes">{nodes}</div>{config}'
            "</section>\n")


def _device_plugin(plan: Plan) -> str:
    """Each node's device-plugin config today and to select, then the ConfigMap; '' without a plan."""
    dp = plan.device_plugin
    if dp is None:
        return ""
    rows = "".join(
        f'<tr data-node="{e(n.node)}"><td>{e(n.node)}</td><td>{n.gpus_total}× {e(n.gpu_model)}</td>'
        f"<td>{e(n.current_config or t.DASH)}</td><td>{e(dpt.change_text(n))}</td><td><code>{e(dpt.label(n))}</code>"
        f"</td><td>{', '.join(e(w) for w in n.workloads) or e(t.DASH)}</td><td><ul>"
        f"{''.join(f'<li>{e(r)}</li>' for r in n.reasons)}</ul></td></tr>" for n in dp.nodes)
    config = dpt.configmap_yaml(plan)
    block = (f'<h3 class="config">Device-plugin ConfigMap</h3><pre class="config"><code>{e(config)}</code></pre>'
             if config else "")
    return (f'<h2>Device-plugin sharing per node</h2>\n<section class="device-plugin"><p class="note">Set each node\'s '
            f"<code>{e(DEVICE_PLUGIN_CONFIG_LABEL)}</code> label to its config from the device plugin's ConfigMap "
            f"<code>{e(dp.namespace)}/{e(dp.configmap)}</code>.</p><table><thead><tr><th>Node</th><th>GPUs</th>"
            "<th>Config today</th><th>Sharing</th><th>Node label to set</th><th>Workloads</th><th>Why</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>{block}</section>\n")


def _head(plan: Plan) -> str:
    css = files("recommender.outputs").joinpath("report.css").read_text(encoding="utf-8")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f"<title>GPU right-sizing report · {e(t.human_utc(plan.window_end))}</title>\n"
            f"<style>\n{css}</style>\n</head>\n")


def _scaling(plan: Plan) -> str:
    """Every scaling plan's numbers, one list item per workload (the sections chart only the top workloads)."""
    items = [f"<li>{e(line)}</li>" for r in plan.recommendations if (line := t.scaling_line(r))]
    return f'<h2>Autoscaling</h2>\n<ul class="scaling">{"".join(items)}</ul>\n' if items else ""


def render_html(plan: Plan, snapshot: Snapshot | None = None, *, top_n: int = TOP_N) -> str:
    """The whole page as one string; sections and charts for the ``top_n`` workloads that save most."""
    chosen = top_workloads(plan, top_n)
    anchors = {r.ref.key: f"w-{i}" for i, r in enumerate(chosen)}
    body = (
        f"<header><h1>GPU right-sizing report</h1><p class=\"meta\">{e(t.window_line(plan))}</p>"
        f'<p class="meta">generated {e(t.human_utc(plan.generated_at))}</p></header>\n'
        f'<p class="summary">{e(t.fleet_line(plan))}</p>\n{_cards(plan)}\n{_warnings(plan)}\n'
        f"<h2>GPUs held vs needed by namespace</h2>\n{_fleet(plan)}\n"
        f"<h2>Workloads</h2>\n{_table(plan, snapshot, anchors)}\n{_mig(plan)}{_device_plugin(plan)}"
        f"<h2>Per workload</h2>\n{_sections(plan, snapshot, chosen, anchors)}\n{_scaling(plan)}"
        f"<footer>gpu-rightsizer report · JSON schema {e(SCHEMA_VERSION)} · window step {plan.step_s:g} s</footer>\n"
    )
    return f"{_head(plan)}<body>\n<main>\n{body}</main>\n</body>\n</html>\n"


@register_formatter("html")
def html(plan: Plan, snapshot: Snapshot | None) -> str:
    """The default page: :data:`TOP_N` workloads charted."""
    return render_html(plan, snapshot)
