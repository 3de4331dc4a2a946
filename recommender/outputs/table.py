"""``table``: a terminal table rendered by rich into a plain string (no colour codes, so it pipes,
diffs and golden-tests cleanly), one row per workload, then the fleet line and warnings.

Narrow terminals (below :data:`NARROW_WIDTH` columns) get a compact layout with an ASCII box and
ASCII arrows, so the report survives an 80-column CI log or a terminal without UTF-8.
"""

from __future__ import annotations

import os
import shutil
from io import StringIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from recommender.model import Plan, Recommendation, Snapshot
from recommender.outputs import text as t
from recommender.outputs.registry import register_formatter

DEFAULT_WIDTH = 160
NARROW_WIDTH = 100  # below this (or when the wide columns do not fit): compact, ASCII
CAPTION = "used: memory need (target) / device memory per replica, compute need as a share of one GPU"
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
)
_OVERHEAD = 3 * len(_WIDE) + 1  # a space of padding each side of a cell, a separator between, two edges
MIN_RECOMMENDED = 24


def _wide_rows(plan: Plan, snapshot: Snapshot | None) -> list[tuple[str, ...]]:
    return [(r.ref.namespace, f"{r.ref.kind}/{r.ref.name}\n{t.class_text(r)}", t.alloc_text(r.workload.allocation),
             t.used_text(r, snapshot), _recommended(r), t.gpus_text(r), t.money(r.monthly_savings_usd, ""),
             _confidence(r)) for r in plan.recommendations]


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

    GPUs held -> needed and $/month over confidence sit in fixed-width columns that never wrap.
    """
    table.add_column("workload", overflow="fold", ratio=4)
    table.add_column("current / used", overflow="fold", ratio=4)
    table.add_column("recommended", overflow="fold", ratio=4)
    table.add_column("GPUs", justify="right", no_wrap=True, width=12)
    table.add_column("$/mo", justify="right", no_wrap=True, width=8)
    return [(f"{r.ref.key}\n{t.class_text(r)}",
             f"{t.alloc_text(r.workload.allocation)}\nused {t.used_text(r, snapshot)}", _recommended(r),
             t.gpus_text(r), f"{t.money(r.monthly_savings_usd, '')}\n{_confidence(r)}")
            for r in plan.recommendations]


def _recommended(rec: Recommendation) -> str:
    """The recommendation, over the autoscaler that owns the replicas where one does."""
    return "\n".join(x for x in (t.recommended_text(rec), t.autoscaler_text(rec)) if x)


def _confidence(rec: Recommendation) -> str:
    return t.percent(rec.confidence) if rec.actionable else t.DASH


def _table(plan: Plan, snapshot: Snapshot | None, width: int) -> tuple[Table, bool]:
    """The table in the wide layout when it fits ``width``, else the narrow ASCII one."""
    rows = _wide_rows(plan, snapshot)
    widths = _wide_widths(rows, width) if width >= NARROW_WIDTH else None
    narrow = widths is None
    title = f"GPU right-sizing · {t.window_line(plan)}"
    caption = CAPTION + ("; $/mo over confidence" if narrow else "")
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


def render_table(plan: Plan, snapshot: Snapshot | None = None, *, width: int = DEFAULT_WIDTH) -> str:
    """The report as terminal text ``width`` columns wide; compact and ASCII below :data:`NARROW_WIDTH`."""
    buf = StringIO()
    # markup off: workload names and warnings are user data, and "[x]" must print as typed
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, no_color=True,
                      markup=False, emoji=False, highlight=False, legacy_windows=False)
    table, narrow = _table(plan, snapshot, width)
    console.print(table)
    lines = [t.fleet_line(plan), *(f"warning: {w}" for w in plan.warnings)]
    scaling = [line for r in plan.recommendations if (line := t.scaling_line(r))]
    for line in lines[:1] + scaling + lines[1:]:  # scaling lines unwrapped: one line per workload, at any width
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
