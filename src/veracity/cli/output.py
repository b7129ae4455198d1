"""Everything the CLI prints goes through here: dataset and model text are never raw."""

from __future__ import annotations

import click

from veracity.text import terminal_safe


def safe(text: object) -> str:
    """Printable text: controls, bidi overrides and lone surrogates spelled out; newlines kept."""
    return terminal_safe(text, keep_newlines=True)


def echo(message: object = "", err: bool = False) -> None:
    """``click.echo`` of :func:`safe` text."""
    click.echo(safe(message), err=err)
