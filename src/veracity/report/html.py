"""Building blocks for self-contained HTML reports: escaping, tables, embedded figures."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from importlib.resources import files
from typing import Any

from veracity.store import clean_json
from veracity.text import html_text, json_safe, slug, terminal_safe

# Inside <script type="application/json"> nothing may read as markup, so "</script>" and
# "<!--" cannot end or bend the block; JSON.parse turns the escapes back.
_JSON_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_JSON_UNSAFE_RE = re.compile("[<>&\u2028\u2029]")


@cache
def _static(name: str) -> str:
    return files("veracity.report").joinpath("static", name).read_text(encoding="utf-8")


esc = html_text
"""The report's name for :func:`veracity.text.html_text`."""


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
    return (f"<div class='scroll'><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


def make_text_harmless(fig: Any) -> None:
    """Spell out control and bidi characters in every text of a figure (titles, legends, tick
    labels from data such as subject names): drawn raw they are missing glyphs, and
    matplotlib's warning about them would print the raw character to the terminal."""
    from matplotlib.text import Text
    from matplotlib.ticker import Formatter

    class Harmless(Formatter):
        """Tick labels are made at draw time: clean them as they are made."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __call__(self, x: Any, pos: Any = None) -> str:
            return terminal_safe(self.inner(x, pos))

        def format_ticks(self, values: Any) -> list[str]:
            return [terminal_safe(label) for label in self.inner.format_ticks(values)]

        def set_locs(self, locs: Any) -> None:
            self.inner.set_locs(locs)

        def get_offset(self) -> str:
            return terminal_safe(self.inner.get_offset())

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if not isinstance(axis.get_major_formatter(), Harmless):
                axis.set_major_formatter(Harmless(axis.get_major_formatter()))
                axis.set_minor_formatter(Harmless(axis.get_minor_formatter()))
    for text in fig.findobj(Text):
        shown = text.get_text()
        if shown and shown != (safe := terminal_safe(shown)):
            text.set_text(safe)


def figure(fig: Any, alt: str) -> str:
    """Embed a matplotlib figure as a base64 PNG and close it."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    make_text_harmless(fig)
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    name = slug(alt.lower(), keep="") or "plot"
    return (f"<figure class='plot'><img alt=\"{esc(alt)}\" data-name=\"{esc(name)}\" "
            f"src=\"data:image/png;base64,{data}\"><figcaption>{esc(alt)} "
            "<button type='button' class='png'>PNG</button></figcaption></figure>")


def json_block(element_id: str, value: Any) -> str:
    """Data for the page's script: strict JSON that no text inside can break out of."""
    text = json.dumps(clean_json(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    text = json_safe(_JSON_UNSAFE_RE.sub(lambda m: _JSON_UNSAFE[m.group()], text))
    return f"<script type='application/json' id=\"{esc(element_id)}\">{text}</script>"


def _csp(script: str, scripts_beside: bool = False) -> str:
    """Only the report's own script may run (by its hash) and nothing is fetched; with
    ``scripts_beside``, also the item chunks beside the page (a sidecar), as scripts."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    beside = " 'self'" if scripts_beside else ""
    return (f"default-src 'none'; script-src 'sha256-{digest}'{beside}; style-src 'unsafe-inline'; "
            "img-src data: blob:; base-uri 'none'; form-action 'none'")


def package_text(resource: str) -> str:
    """The text of ``"package:file"``, a file shipped inside a package (a method's drill.js)."""
    package, _, name = resource.partition(":")
    return files(package).joinpath(name).read_text(encoding="utf-8")


def page(title: str, sections: Sequence[str], scripts: Sequence[str] = (),
         scripts_beside: bool = False) -> str:
    """A complete HTML document with inline CSS and script and no external resources (but
    for the chunk scripts of a sidecar, with ``scripts_beside``); ``scripts``
    (``"package:file"``) run after the report's own, e.g. methods' drill-downs."""
    script = "\n".join([_static("report.js"), *(package_text(s) for s in scripts)])
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{_csp(script, scripts_beside)}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{_static('report.css')}</style></head><body>"
        f"<h1>{esc(title)}</h1>{''.join(sections)}<script>{script}</script></body></html>\n"
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
