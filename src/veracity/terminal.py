"""Diagnostics reach the terminal harmless: warnings and log records raised while working on
dataset or model text (matplotlib's "Glyph 27 (\\x1b) missing from font" repeats the
character it could not draw) get their control, bidi and lone-surrogate characters spelled out.

:func:`arm` does it for the whole process (the CLI and the gateway call it);
:func:`harmless_warnings` for one block (reports built from the library).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

from veracity.text import terminal_safe

_armed = False


def _safe(value: Any) -> Any:
    return terminal_safe(value, keep_newlines=True) if isinstance(value, str) else value


def _shown(show: Any) -> Any:
    """``warnings.showwarning`` that hands ``show`` the message made harmless."""

    def harmless(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
        show(_safe(str(message)), category, filename, lineno, file, line)

    return harmless


@contextmanager
def harmless_warnings() -> Iterator[None]:
    """Warnings shown inside the block are made harmless (filters are left as they are)."""
    before = warnings.showwarning
    warnings.showwarning = _shown(before)
    try:
        yield
    finally:
        warnings.showwarning = before


def arm() -> None:
    """Every warning and log record of this process is shown harmless from now on."""
    global _armed
    if _armed:
        return
    _armed = True
    warnings.showwarning = _shown(warnings.showwarning)
    make = logging.getLogRecordFactory()

    def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made = make(*args, **kwargs)
        made.msg = _safe(made.msg)
        if isinstance(made.args, Mapping):
            made.args = {k: _safe(v) for k, v in made.args.items()}
        elif made.args:
            made.args = tuple(_safe(a) for a in made.args)
        return made

    logging.setLogRecordFactory(record)
