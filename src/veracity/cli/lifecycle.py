"""One command's run lifecycle: a Context from the common options, closed at the end, the
call counters and wall time for the summary line, and the run directory's report."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from veracity.cli.options import CommonOptions, pop_common
from veracity.cli.output import echo
from veracity.client import CallStats
from veracity.errors import BackendError, ErrorKind
from veracity.records import RecordError
from veracity.runlock import run_dir_claimed
from veracity.runs.common import Context, total_stats
from veracity.store import RunDir


@dataclass
class CommandRun:
    """The resources of one command; ``stats`` is filled when its context closes."""

    ctx: Context
    started: float = field(default_factory=time.perf_counter)
    stats: CallStats = field(default_factory=CallStats)

    def calls_line(self) -> str:
        """``N model calls, M cache hits, S s``: the last line of every command."""
        return (f"{self.stats.model_calls} model calls, {self.stats.cache_hits} cache hits, "
                f"{time.perf_counter() - self.started:.1f} s")


@contextmanager
def command_run(kw: dict[str, Any] | CommonOptions) -> Iterator[CommandRun]:
    """A Context from a command's common options (taken out of its ``kw``), closed
    (models, embedders) whatever happens; the call counters are kept for the summary."""
    run = CommandRun((kw if isinstance(kw, CommonOptions) else pop_common(kw)).context())
    try:
        yield run
    finally:
        run.stats = total_stats(run.ctx)
        run.ctx.close()


def never_answered(errors: Sequence[RecordError | str | None], answered: int) -> None:
    """A BackendError (exit code 1) when items were given, every one failed, and no model call
    of the command succeeded: a run of a server that is down did not succeed. ``errors``: each
    item's error (None when it was scored); ``answered``: model calls that succeeded."""
    if not errors or answered > 0 or any(e is None for e in errors):
        return
    kinds = {e.kind for e in errors if isinstance(e, RecordError)}
    if kinds - {ErrorKind.SERVER}:
        return  # the model answered something: rejected, empty or unusable answers
    last = errors[-1]
    message = last.message if isinstance(last, RecordError) else last
    raise BackendError(f"none of the {len(errors)} items could be scored: the model's server "
                       f"never answered (last error: {message})")


def write_report(run: RunDir | None, title: str, quiet: bool = False) -> None:
    """The run directory's report.html, and where both are (unless ``quiet``)."""
    if run is None:
        return
    from veracity.report import build_report

    with run_dir_claimed(run.path):
        report = build_report([run.path], run.path / "report.html", title=title)
    if not quiet:
        echo(f"run directory: {run.path}\nreport: {report}")
