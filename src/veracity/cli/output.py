"""Everything the CLI prints goes through here: dataset and model text are never raw."""

from __future__ import annotations

import click

from veracity.text import redact_urls, terminal_safe


def safe(text: object) -> str:
    """Printable text: controls, bidi overrides and lone surrogates spelled out, and
    credentials inside URLs redacted; newlines kept."""
    return terminal_safe(redact_urls(str(text)), keep_newlines=True)


def echo(message: object = "", err: bool = False) -> None:
    """``click.echo`` of :func:`safe` text."""
    click.echo(safe(message), err=err)
