"""``veracity models``, ``veracity cache``, ``veracity report``."""

from __future__ import annotations

from pathlib import Path

import click

from veracity.cache import Cache
from veracity.cli.options import handles_errors
from veracity.registry import list_providers
from veracity.report import build_report


@click.command()
def models() -> None:
    """List model and embedder specs and what each needs installed."""
    model_providers, embedder_providers = list_providers()
    for title, providers in (("Models", model_providers), ("Embedders", embedder_providers)):
        click.echo(f"{title}:")
        for p in providers:
            needs = ", ".join(p.requires) or "nothing extra"
            if p.extra:
                needs += f" (pip install 'veracity[{p.extra}]')"
            status = "ready" if p.installed() else "missing"
            click.echo(f"  {p.examples:<44} {status}")
            click.echo(f"  {'':<44} {p.description}")
            click.echo(f"  {'':<44} needs: {needs}")
            for option in p.options:
                values = "|".join(option.choices) or option.type.__name__.upper()
                click.echo(f"  {'':<44} --embedder-option {option.name}={values}: {option.help}")
        click.echo("")


@click.group()
def cache() -> None:
    """Inspect or clear the generation and embedding cache."""


@cache.command("info")
@click.option("--cache", "cache_path", type=click.Path(path_type=Path), default=None)
def cache_info(cache_path: Path | None) -> None:
    """Where the cache is, its size, and entries per model / embedder."""
    c = Cache(cache_path)
    stats = c.stats()
    click.echo(f"cache: {stats.path}  ({stats.size_bytes / 1e6:.1f} MB)")
    for kind, spec, count in stats.rows:
        click.echo(f"  {kind:<12} {spec:<40} {count:>8}")
    if not stats.rows:
        click.echo("  (empty)")
    c.close()


@cache.command("clear")
@click.option("--cache", "cache_path", type=click.Path(path_type=Path), default=None)
@click.option("--spec", default=None, help="Only entries of this model or embedder spec.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def cache_clear(cache_path: Path | None, spec: str | None, yes: bool) -> None:
    """Delete cached generations and embeddings."""
    c = Cache(cache_path)
    if not yes:
        click.confirm(f"delete {'all entries' if spec is None else spec} from {c.path}?", abort=True)
    click.echo(f"deleted {c.clear(spec)} entries")
    c.close()


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=Path("report.html"),
              show_default=True, help="HTML file to write.")
@click.option("--title", default="veracity report", show_default=True)
@handles_errors
def report(runs: tuple[Path, ...], out: Path, title: str) -> None:
    """One self-contained HTML report comparing run directories."""
    click.echo(f"report: {build_report(list(runs), out, title)}")
