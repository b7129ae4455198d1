"""Interactive pieces of a report: item tables (sort, filter, drill-down, CSV). Python hands
over data as JSON; ``static/report.js`` renders it, and a method's own script adds its
drill-down and any view over a table (γ's comparison of two runs is in γ's ``drill.js``).

A section adds a table with :func:`item_table` and gets back HTML to place where it wants;
rows are plain dicts with one value per column, ``_d`` for the drill-down and ``_run`` for
the run they come from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from veracity.report.html import esc, json_block

Kind = Literal["num", "text", "cat"]
Drill = str
"""A drill-down view's name, as a method's script registers it (``veracityDrills.register``)."""


@dataclass(frozen=True)
class Column:
    """One table column: ``num`` sorts numerically, ``cat`` gets a filter menu, ``text`` is
    searched."""

    key: str
    label: str
    kind: Kind = "text"
    digits: int = 3
    help: str = ""
    group: str = ""
    """Shown in a header row above consecutive columns of the same group."""


def present(rows: Sequence[Mapping[str, Any]], key: str) -> bool:
    """True when some row holds a value for ``key`` (optional columns show only then)."""
    return any(row.get(key) is not None for row in rows)


def item_table(
    name: str,
    columns: Sequence[Column],
    rows: Sequence[Mapping[str, Any]],
    *,
    drill: Drill | None = None,
    range_key: str | None = None,
    page_size: int = 50,
    caption: str | None = None,
) -> str:
    """A sortable, filterable table of every row; ``name`` is unique in the page and names
    the CSV export. Text columns are the search box's fields; ``caption`` replaces the line
    above the table."""
    search = [c.key for c in columns if c.kind != "num"]
    spec = {
        "name": name,
        "columns": [asdict(c) for c in columns],
        "rows": list(rows),
        "drill": drill,
        "search": search,
        "search_label": ", ".join(c.label for c in columns if c.kind != "num"),
        "range": range_key,
        "page_size": page_size,
    }
    hint = " Click a row to open it." if drill else ""
    said = esc(caption) if caption else f"All {len(rows)} rows"
    return (f"<p class='muted'>{said}; click a column to sort.{hint}</p>"
            f"<div class='vtable' data-src=\"{esc(name)}\"></div>{json_block(name, spec)}")
