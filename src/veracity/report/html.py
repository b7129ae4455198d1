"""Building blocks for self-contained HTML reports: escaping, tables, embedded figures."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from veracity.text import display_safe

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-word}
img{max-width:100%} details{margin:0.5em 0} .muted{color:#777}
"""


def esc(text: Any) -> str:
    """HTML-escape any value; control and bidi characters become visible as \\xNN / \\uNNNN."""
    return html.escape(display_safe(text), quote=True)


def fmt(value: Any, digits: int = 3) -> str:
    """Numbers rounded, None/NaN as an em dash, everything else escaped."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return esc(value)
    if isinstance(value, float):
        if value != value:  # NaN
            return "—"
        return f"{value:.{digits}f}"
    return esc(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 3) -> str:
    """An HTML table; numeric cells are right-aligned."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            cls = ' class="num"' if isinstance(cell, int | float) and not isinstance(cell, bool) else ""
            cells.append(f"<td{cls}>{fmt(cell, digits)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def figure(fig: Any, alt: str) -> str:
    """Embed a matplotlib figure as a base64 PNG and close it."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def page(title: str, sections: Sequence[str]) -> str:
    """A complete HTML document with inline CSS and no external resources."""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{esc(title)}</h1>{''.join(sections)}</body></html>\n"
    )


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend, imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def plain_text_labels() -> Iterator[None]:
    """Figures drawn inside take labels literally: model names, subjects and file names may
    hold ``$``, which matplotlib would otherwise parse as mathtext (and fail on)."""
    with pyplot().rc_context({"text.parse_math": False}):
        yield
