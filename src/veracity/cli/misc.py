"""``veracity models``, ``veracity cache``, ``veracity report``."""

from __future__ import annotations

from pathlib import Path

import click

from veracity.cache import Cache
from veracity.cli.options import handles_errors
from veracity.cli.output import echo
from veracity.paths import check_output_file
from veracity.registry import SCORERS, declared, list_providers
from veracity.report import build_report, compare_json
from veracity.space import writing
from veracity.store import RunDir, dumps


@click.command()
def models() -> None:
    """List model and embedder specs and what each needs installed."""
    model_providers, embedder_providers = list_providers()
    for title, providers, flag in (("Models", model_providers, "--model-option"),
                                   ("Embedders", embedder_providers, "--embedder-option"),
                                   ("Pair scorers (FEWL --similarity)", list(SCORERS.values()),
                                    "--scorer-option")):
        echo(f"{title}:")
        for p in providers:
            needs = ", ".join(p.requires) or "nothing extra"
            if p.extra:
                needs += f" (pip install 'veracity[{p.extra}]')"
            status = "ready" if p.installed() else "missing"
            echo(f"  {p.listing():<44} {status}")
            echo(f"  {'':<44} {p.description}")
            echo(f"  {'':<44} needs: {needs}")
            for option in declared(p):
                values = "|".join(option.choices) or getattr(option.type, "__name__", "str").upper()
                default = "" if option.default is None else f" (default {option.default})"
                echo(f"  {'':<44} {flag or 'option'} {option.name}={values}: {option.help}{default}")
        echo("")


@click.group()
def cache() -> None:
    """Inspect or clear the generation and embedding cache."""


@cache.command("info")
@click.option("--cache", "cache_path", type=click.Path(path_type=Path), default=None)
@handles_errors
def cache_info(cache_path: Path | None) -> None:
    """Where the cache is, its size, and entries per model / embedder."""
    c = Cache(cache_path)
    stats = c.stats()
    echo(f"cache: {stats.path}  ({stats.size_bytes / 1e6:.1f} MB)")
    for kind, spec, count in stats.rows:
        echo(f"  {kind:<12} {spec:<40} {count:>8}")
    if not stats.rows:
        echo("  (empty)")
    c.close()


@cache.command("clear")
@click.option("--cache", "cache_path", type=click.Path(path_type=Path), default=None)
@click.option("--spec", default=None, help="Only entries of this model or embedder spec.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@handles_errors
def cache_clear(cache_path: Path | None, spec: str | None, yes: bool) -> None:
    """Delete cached generations and embeddings."""
    c = Cache(cache_path)
    if not yes:
        click.confirm(f"delete {'all entries' if spec is None else spec} from {c.path}?", abort=True)
    with writing(c.path, "the cache (VACUUM needs room for a copy of it)"):
        deleted = c.clear(spec)
    echo(f"deleted {deleted} entries")
    c.close()


@click.command()
@click.argument("runs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--traffic", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="A traffic log of 'veracity serve' instead of run directories.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="HTML file to write (default: RUN/report.html for one run directory, "
                   "LOG.html beside a traffic log, report.html here for several runs: never "
                   "over an existing file without --force).")
@click.option("--force", is_flag=True,
              help="Replace an existing report.html in this folder (several runs, no --out).")
@click.option("--title", default="veracity report", show_default=True)
@click.option("--model-info", type=click.Path(dir_okay=False),
              help="CSV with a header: model, params_b (size in billions), external scores "
                   "(e.g. truthfulqa); compared against the deception runs. 'paper': the "
                   "DB-MMLU paper's Table 1 (size, MMLU, TruthfulQA of its ten models).")
@click.option("--json", "as_json", is_flag=True,
              help="Print each method's comparison of its runs as JSON, keyed by method (gamma: "
                   "the paper's Table 8, models x domains, with the rankings) instead of HTML.")
@handles_errors
def report(runs: tuple[Path, ...], traffic: Path | None, out: Path | None, force: bool,
           title: str, model_info: str | None, as_json: bool) -> None:
    """One self-contained HTML report comparing run directories (or of a traffic log)."""
    if as_json:
        if traffic is not None or not runs:
            raise click.UsageError("--json compares run directories (no --traffic)")
        echo(dumps(compare_json([RunDir.open(p) for p in runs]), indent=2))
        return
    if traffic is not None:
        if runs or model_info is not None:
            raise click.UsageError("--traffic FILE takes no run directories and no --model-info")
        from veracity.report.traffic import build_traffic_report

        out = out or traffic.with_suffix(".html")
        check_output_file(out)
        echo(f"report: {build_traffic_report(traffic, out, title)}")
        return
    if not runs:
        raise click.UsageError("give at least one run directory (or --traffic FILE)")
    out = out or _default_report(runs, force)
    check_output_file(out)
    echo(f"report: {build_report(list(runs), out, title, model_info)}")


def _default_report(runs: tuple[Path, ...], force: bool) -> Path:
    """Where a report goes without --out: one run's own report.html (rebuilt in place), or
    report.html in the current folder for several, never over a file a user may want."""
    if len(runs) == 1 and runs[0].is_dir():
        return runs[0] / "report.html"
    here = Path("report.html")
    if here.exists() and not force:
        raise click.UsageError(
            f"{here.resolve()} exists: name the report with --out FILE, or pass --force to "
            "replace it")
    return here
