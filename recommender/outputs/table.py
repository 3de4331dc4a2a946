"""``table``: a terminal table rendered by rich into a plain string (no colour codes, so it pipes,
diffs and golden-tests cleanly), one row per workload, why each medium or high risk, the per-node MIG
plan, then the fleet line and warnings.

Narrow terminals (below :data:`NARROW_WIDTH` columns) get a compact layout with an ASCII box and
ASCII arrows, so the report survives an 80-column CI log or a terminal without UTF-8.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from io import StringIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from recommender.core.annotations import MIG_CONFIG_LABEL
from recommender.core.plan import Plan, Recommendation
from recommender.core.usage import Snapshot
from recommender.outputs import text as t
from recommender.outputs.registry import register_formatter

DEFAULT_WIDTH = 160
NARROW_WIDTH = 100  # below this (or when the wide columns do not fit): compact, ASCII
CAPTION = "used: memory need (target) / device memory per replica, compute need as a share of one GPU"
PROVISIONAL_MARK = "\nprov."  # under the confidence, in its 5-column cell
PROVISIONAL_CAPTION = "; prov.: provisional, on less history than --min-history"
_ASCII = str.maketrans({"×": "x", "→": "->", "–": "-", "·": "|", "≥": ">=", "≤": "<=", "…": "...", "−": "-"})


_WIDE = (  # header, natural-width cap (None: takes what is left), justify
    ("namespace", 16, "left"),
    ("kind/name", 30, "left"),
    ("current", 18, "left"),
    ("used", 20, "left"),
    ("recommended", None, "left"),
    ("held→needed", 11, "right"),
    ("$/month", 9, "right"),
    ("conf.", 5, "right"),
    ("risk", 6, "left"),
)
_OVERHEAD = 3 * len(_WIDE) + 1  # a space of padding each side of a cell, a separator between, two edges
MIN_RECOMMENDED = 24


def _wide_rows(plan: Plan, snapshot: Snapshot | None) -> list[tuple[str, ...]]:
    return [(r.ref.namespace, f"{r.ref.kind}/{r.ref.name}\n{t.class_text(r)}", t.alloc_text(r.workload.allocation),
             t.used_text(r, snapshot), _recommended(r), t.gpus_text(r), t.money(r.monthly_savings_usd, ""),
             _confidence(r), r.risk) for r in plan.recommendations]


def _lines_len(cell: str) -> int:
    """Width of a cell that may hold several lines (kind/name over the class)."""
    return max(cell_len(line) for line in cell.split("\n"))


def _wide_widths(rows: list[tuple[str, ...]], width: int) -> list[int] | None:
    """Column widths that fit ``width``, or None when the recommended column would be too narrow.

    Widths are set here rather than left to rich, whose shrinking crops right-hand columns once the
    widest wrappable columns tie.
    """
    natural = [max([cell_len(h), *(_lines_len(r[i]) for r in rows)]) for i, (h, _, _) in enumerate(_WIDE)]
    widths = [n if cap is None else min(n, cap) for n, (_, cap, _) in zip(natural, _WIDE, strict=True)]
    rec = _WIDE.index(next(c for c in _WIDE if c[1] is None))
    widths[rec] = min(natural[rec], width - _OVERHEAD - (sum(widths) - widths[rec]))
    return widths if widths[rec] >= min(MIN_RECOMMENDED, natural[rec]) else None


def _narrow(plan: Plan, snapshot: Snapshot | None, table: Table) -> list[tuple[str, ...]]:
    """Five columns, the workload and what it holds/uses stacked, so 80 columns stay readable.

    GPUs held -> needed and $/month over confidence over risk sit in fixed-width columns that never wrap.
    """
    table.add_column("workload", overflow="fold", ratio=4)
    table.add_column("current / used", overflow="fold", ratio=4)
    table.add_column("recommended", overflow="fold", ratio=4)
    table.add_column("GPUs", justify="right", no_wrap=True, width=12)
    table.add_column("$/mo", justify="right", no_wrap=True, width=8)
    return [(f"{r.ref.key}\n{t.class_text(r)}",
             f"{t.alloc_text(r.workload.allocation)}\nused {t.used_text(r, snapshot)}", _recommended(r),
             t.gpus_text(r), f"{t.money(r.monthly_savings_usd, '')}\n{_confidence(r)}\n{r.risk}")
            for r in plan.recommendations]


def _recommended(rec: Recommendation) -> str:
    """The recommendation, over the autoscaler that owns the replicas where one does."""
    return "\n".join(x for x in (t.recommended_text(rec), t.autoscaler_text(rec)) if x)


def _confidence(rec: Recommendation) -> str:
    return t.confidence_text(rec, PROVISIONAL_MARK)


def _table(plan: Plan, snapshot: Snapshot | None, width: int) -> tuple[Table, bool]:
    """The table in the wide layout when it fits ``width``, else the narrow ASCII one."""
    rows = _wide_rows(plan, snapshot)
    widths = _wide_widths(rows, width) if width >= NARROW_WIDTH else None
    narrow = widths is None
    title = f"GPU right-sizing · {t.window_line(plan)}"
    caption = CAPTION + ("; $/mo over confidence over risk" if narrow else "")
    caption += PROVISIONAL_CAPTION if any(r.provisional for r in plan.recommendations) else ""
    table = Table(title=title.translate(_ASCII) if narrow else title, caption=caption, safe_box=True,
                  box=box.ASCII if narrow else box.SIMPLE_HEAD, expand=narrow, highlight=False)
    if widths is None:
        rows = _narrow(plan, snapshot, table)
    else:
        for (header, _, justify), w in zip(_WIDE, widths, strict=True):
            table.add_column(header, justify=justify, width=w, overflow="fold")  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*(cell.translate(_ASCII) if narrow else cell for cell in row))
    return table, narrow


def _risks(plan: Plan, narrow: bool) -> Table | None:
    """Why each medium or high risk, one workload a row (low risks say why in the other formats)."""
    risky = [r for r in plan.recommendations if r.risk != "low"]
    if not risky:
        return None
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_column(overflow="fold")
    for r in risky:
        grid.add_row("", r.ref.key, t.risk_text(r).translate(_ASCII) if narrow else t.risk_text(r))
    return grid


MIG_TITLE = "MIG plan per node"
MIG_CAPTION = (f"label each node {MIG_CONFIG_LABEL}=<value>: the GPU Operator's MIG manager applies its layout, "
               "evicting the pods of each reconfigured GPU; the mig-parted config: -o markdown, html, json or yaml "
               "(or -o csv --output-file FILE)")


def _mig_table(plan: Plan, narrow: bool) -> Table:
    """One row per node: its GPUs' layouts (runs of equal GPUs on one line), the label value, what changes.
    Narrow: the model and the reconfigured GPUs under the node's name, no workloads column."""
    table = Table(title=MIG_TITLE, caption=MIG_CAPTION, safe_box=True, box=box.ASCII if narrow else box.SIMPLE_HEAD,
                  expand=narrow, highlight=False)
    label_width = max(len(MIG_CONFIG_LABEL), *(len(n.config_name) for n in plan.mig_nodes))
    table.add_column("node", overflow="fold")
    if not narrow:
        table.add_column("GPU model", overflow="fold")
    table.add_column("MIG devices per GPU", overflow="fold")
    table.add_column(MIG_CONFIG_LABEL, overflow="fold", min_width=min(label_width, 40))
    if not narrow:
        table.add_column("reconfigured", overflow="fold")
        table.add_column("workloads", overflow="fold")
    for n in plan.mig_nodes:
        gpus = "\n".join(t.gpu_lines(n))
        cells = ([f"{n.node}\n{n.gpu_model}\n{t.reconfigured_text(n)} reconfigured", gpus, n.config_name] if narrow
                 else [n.node, n.gpu_model, gpus, n.config_name, t.reconfigured_text(n), "\n".join(n.workloads)])
        table.add_row(*(c.translate(_ASCII) if narrow else c for c in cells))
    return table


def render_table(plan: Plan, snapshot: Snapshot | None = None, *, width: int = DEFAULT_WIDTH) -> str:
    """The report as terminal text ``width`` columns wide; compact and ASCII below :data:`NARROW_WIDTH`."""
    buf = StringIO()
    # markup off: workload names and warnings are user data, and "[x]" must print as typed
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, no_color=True,
                      markup=False, emoji=False, highlight=False, legacy_windows=False)
    table, narrow = _table(plan, snapshot, width)
    console.print(table)
    risks = _risks(plan, narrow)
    if risks is not None:
        console.print("Risk, medium or high, and why:")
        console.print(risks)
    if plan.mig_nodes:
        console.print()
        console.print(_mig_table(plan, narrow))
        console.print()
    lines = [t.fleet_line(plan), *(f"warning: {w}" for w in plan.warnings)]
    scaling = [line for r in plan.recommendations if (line := t.scaling_line(r))]
    if narrow:  # a narrow terminal gets them wrapped, continuation lines indented
        scaling = [textwrap.fill(line, width, subsequent_indent="    ", break_on_hyphens=False) for line in scaling]
    for line in lines[:1] + scaling + lines[1:]:  # wide: one unwrapped line per workload, found by its key
        console.print(line.translate(_ASCII) if narrow else line, soft_wrap=line in scaling)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def terminal_width() -> int:
    """The terminal's width when there is one (``COLUMNS`` first), else :data:`DEFAULT_WIDTH`."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


@register_formatter("table")
def table(plan: Plan, snapshot: Snapshot | None) -> str:
    """The default, human format: sized to the terminal it is printed on."""
    return render_table(plan, snapshot, width=terminal_width())


def full_width(plan: Plan, snapshot: Snapshot | None) -> int:
    """Columns the wide layout needs for the recommended column not to wrap (at least :data:`DEFAULT_WIDTH`)."""
    rows = _wide_rows(plan, snapshot)
    natural = [max([cell_len(h), *(_lines_len(r[i]) for r in rows)]) for i, (h, _, _) in enumerate(_WIDE)]
    return max(DEFAULT_WIDTH, _OVERHEAD + sum(n if cap is None else min(n, cap)
                                              for n, (_, cap, _) in zip(natural, _WIDE, strict=True)))


@register_formatter("wide")
def wide(plan: Plan, snapshot: Snapshot | None) -> str:
    """``-o wide``, as kubectl's: the table at the width its columns need, whatever the terminal's."""
    return render_table(plan, snapshot, width=full_width(plan, snapshot))
