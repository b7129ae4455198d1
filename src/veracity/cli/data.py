"""``veracity data``: the datasets the loaders read, where they come from, and a verified fetch."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from veracity.cli.options import handles_errors
from veracity.cli.output import echo, safe
from veracity.data.catalogue import (
    Dataset,
    DatasetFile,
    UnreachableError,
    catalogue,
    fetch,
    find,
    offline_help,
)
from veracity.errors import DataError
from veracity.paths import user_path


def _size(dataset: Dataset) -> str:
    if not dataset.files:
        return "-"
    if any(f.size is None for f in dataset.files):
        return "?"
    return f"{dataset.size / 1e6:.1f} MB"


def _listing() -> None:
    rows = [(d.name, _size(d), "by hand" if d.manual else f"{len(d.files)} file(s)", d.licence)
            for d in catalogue()]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for name, size, how, licence in rows:
        echo(f"{name:<{widths[0]}}  {size:>{widths[1]}}  {how:<{widths[2]}}  {safe(licence)}")
    echo("\nveracity data show NAME: source, licence, files and checksums; "
         "veracity data get NAME: fetch and verify.")


@click.group(invoke_without_command=True)
@click.pass_context
@handles_errors
def data(ctx: click.Context) -> None:
    """The datasets veracity reads: where each comes from, its licence, and a verified fetch."""
    if ctx.invoked_subcommand is None:
        _listing()


@data.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue as JSON.")
@handles_errors
def list_command(as_json: bool) -> None:
    """Every dataset: size, how it is fetched, licence."""
    if as_json:
        echo(json.dumps([asdict(d) for d in catalogue()], indent=1, ensure_ascii=False))
    else:
        _listing()


@data.command("show")
@click.argument("name")
@handles_errors
def show(name: str) -> None:
    """One dataset: its source, licence, files with their addresses and checksums."""
    d = find(name)
    echo(f"{d.name}: {safe(d.title)}")
    echo(f"  source:  {safe(d.origin)}")
    echo(f"  licence: {safe(d.licence)}")
    if d.note:
        echo(f"  note:    {safe(d.note)}")
    if d.manual:
        echo(f"  by hand: {safe(d.manual)}")
    else:
        echo(f"  size:    {_size(d)} in {len(d.files)} file(s)")
    if d.spec:
        echo(f"  use as:  {safe(d.spec_for(Path('DIR')))}")
    for f in d.files:
        check = f"sha256 {f.sha256}" if f.sha256 else f"git blob {f.git_blob}"
        echo(f"  {safe(f.path)}\n    {safe(f.url)}\n    {check}")


@data.command("get")
@click.argument("name")
@click.option("--to", "folder", type=click.Path(path_type=Path, file_okay=False),
              help="Folder to put it in (default: data/NAME under the current folder).")
@click.option("--mirror", metavar="URL",
              help="Take the files from this mirror of raw.githubusercontent.com instead.")
@handles_errors
def get(name: str, folder: Path | None, mirror: str | None) -> None:
    """Fetch a dataset, verify every file's checksum, and print the --dataset spec to use."""
    d = find(name)
    target = user_path(folder) if folder else Path("data") / d.name

    def progress(file: DatasetFile, how: str) -> None:
        echo(f"  {how:<8} {safe(file.path)}", err=True)

    try:
        count = sum(1 for _ in fetch(d, target, mirror, progress=progress))
    except UnreachableError as exc:
        raise DataError(f"{exc}\nthe source cannot be reached from here; "
                        f"{offline_help(d, target)}") from None
    echo(f"{d.name}: {count} file(s) verified in {safe(target)}")
    if d.spec:
        echo(safe(d.spec_for(target)))
