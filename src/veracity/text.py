"""Making untrusted text (datasets, model replies, file names) safe where it is shown or stored.

- terminals: control characters (C0, C1), bidi overrides and lone surrogates spelled out;
- JSON files and JSON printed to a terminal: the same characters written as ``\\uXXXX``
  escapes, which read back to the identical string;
- CSV cells: a leading ``=``, ``+``, ``-``, ``@``, tab or carriage return (spreadsheet
  formulas) neutralised with a ``'``, reversibly;
- URLs: credentials and key-like query parameters redacted.
"""

from __future__ import annotations

import html
import re

import httpx

# C0 / DEL / C1 controls, bidi embeddings, overrides, isolates and marks, line / paragraph
# separators, and lone UTF-16 surrogates (never valid text; not even encodable as UTF-8)
_OTHER = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff"
_UNSAFE_RE = re.compile(f"[\x00-\x1f{_OTHER}]")
_UNSAFE_KEEP_NEWLINE_RE = re.compile(f"[\x00-\x09\x0b-\x1f{_OTHER}]")
_UNSAFE_KEEP_LAYOUT_RE = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHER}]")
_JSON_UNSAFE_RE = re.compile(f"[{_OTHER}]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _spell(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: object, keep_newlines: bool = False) -> str:
    """``text`` with every character that could move, recolour, retitle or reorder a
    terminal spelled out as ``\\xNN`` / ``\\uNNNN`` (newlines kept when asked)."""
    pattern = _UNSAFE_KEEP_NEWLINE_RE if keep_newlines else _UNSAFE_RE
    return pattern.sub(_spell, str(text))


def display_safe(text: object) -> str:
    """As :func:`terminal_safe`, keeping tabs and newlines (for HTML, where layout is CSS's)."""
    return _UNSAFE_KEEP_LAYOUT_RE.sub(_spell, str(text))


def html_text(text: object) -> str:
    """HTML-escape any value; control and bidi characters become visible as \\xNN / \\uNNNN.

    >>> html_text('<b title="x">')
    '&lt;b title=&quot;x&quot;&gt;'
    """
    return html.escape(display_safe(text), quote=True)


def slug(text: str, keep: str = "._-", fill: str = "-") -> str:
    """``text`` as a file-name part: runs of characters other than ASCII letters, digits and
    ``keep`` become ``fill``, trimmed of ``fill`` at both ends.

    >>> slug("fewl/gold: TruthfulQA v2")
    'fewl-gold-TruthfulQA-v2'
    """
    return re.sub(f"[^A-Za-z0-9{re.escape(keep)}]+", fill, text).strip(fill)


def json_safe(dumped: str) -> str:
    """JSON text with C1 controls, bidi controls, line separators and lone surrogates written
    as ``\\uXXXX`` escapes. JSON's structural characters are ASCII, so these only occur
    inside strings, where the escape decodes back to the same character."""
    return _JSON_UNSAFE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)


def lone_surrogate(text: str) -> int | None:
    """Index of the first lone UTF-16 surrogate in ``text`` (not valid Unicode), or None."""
    match = _SURROGATE_RE.search(text)
    return None if match is None else match.start()


def replace_surrogates(text: str) -> str:
    """Lone surrogates replaced by U+FFFD, so the text can be encoded as UTF-8."""
    return _SURROGATE_RE.sub("\ufffd", text)


_FORMULA = "=+-@\t\r"
_FORMULA_RE = re.compile(f"^'*[{re.escape(_FORMULA)}]")
_NEUTRALISED_RE = re.compile(f"^'+[{re.escape(_FORMULA)}]")


def csv_cell(value: object) -> str:
    """A CSV cell a spreadsheet shows as text, never evaluates: a leading ``=``, ``+``, ``-``,
    ``@``, tab or CR gets a ``'`` in front (and so does an already quoted one, so
    :func:`csv_uncell` restores every value exactly)."""
    text = replace_surrogates(str(value))
    return "'" + text if _FORMULA_RE.match(text) else text


def csv_uncell(text: str) -> str:
    """The value :func:`csv_cell` wrote (one ``'`` before a formula character removed)."""
    return text[1:] if _NEUTRALISED_RE.match(text) else text


_SECRET_PARAM = re.compile(r"key|token|secret|password|passwd|auth|signature|sig|credential",
                           re.IGNORECASE)
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
REDACTED = "REDACTED"


def redact_url(url: str) -> str:
    """``url`` without user name, password, or key-like query parameters."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return _URL_IN_TEXT.sub(REDACTED, url) if "@" in url else url
    items = parsed.params.multi_items()
    secret = [_SECRET_PARAM.search(k) is not None for k, _ in items]
    if not parsed.userinfo and not any(secret):
        return url
    if parsed.userinfo:
        parsed = parsed.copy_with(username=REDACTED, password=None)
    if any(secret):
        parsed = parsed.copy_with(params=[(k, REDACTED if s else v)
                                          for (k, v), s in zip(items, secret, strict=True)])
    return str(parsed)


def redact_urls(text: str) -> str:
    """Every URL inside ``text`` redacted (error messages, stored settings)."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group()), text)


def short(value: object, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters, for error messages about bad input."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"
