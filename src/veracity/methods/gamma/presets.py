"""What every γ command shares on the command line: the default model and embedder, and the
settings of a publication (``--preset paper``) applied where no option was given."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar, cast

import click

from veracity.cli.output import echo
from veracity.store import RunDir

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_MODEL = "llamacpp/default"
DEFAULT_EMBEDDER = "st/default"
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "paper": {
        # §3-4: N = 10 ASCII control-character ball points, temperature 0 (always), answers up
        # to 1,024 tokens, γ in the authors' sqrt(1 - cos) form with Table 8's 0.05
        "gamma": {"n": 10, "ball": "ascii-control", "form": "paper-code", "max_tokens": 1024,
                  "threshold": 0.05, "threshold_form": "paper-code"},
        "isotropy": {"n": 10, "ball": "ascii-control", "max_tokens": 1024},
        # §5: candidates and their γ balls from random UTF-8, as the authors' walker draws both
        "attack": {"n": 10, "charset": "utf8", "ball": "utf8", "form": "paper-code",
                   "max_tokens": 1024},
        # §4: 100 randomly sampled questions per model x corpus are rated
        "annotate export": {"sample": 100},
    },
}
"""Named bundles of settings; ``--preset NAME`` applies one, explicit options still win."""


def preset_option(command: str) -> Callable[[F], F]:
    """``--preset paper`` for ``command`` (a key of each preset)."""
    shown = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in PRESETS["paper"][command].items())
    return click.option("--preset", type=click.Choice(sorted(PRESETS)), default=None,
                        help=f"Settings of a publication: paper = Kersting et al. 2024 ({shown}); "
                             "options given explicitly still win. Recorded in run.json.")


def apply_preset(kw: dict[str, Any], command: str) -> dict[str, Any] | None:
    """Put the preset's settings into ``kw`` where no option was given on the command line;
    print what was applied (to stderr) and return the record for run.json."""
    name = kw.pop("preset", None)
    if name is None:
        return None
    context = click.get_current_context()
    applied: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    for key, value in PRESETS[name][command].items():
        if context.get_parameter_source(key) == click.core.ParameterSource.COMMANDLINE:
            kept[key] = kw[key]
        else:
            kw[key] = applied[key] = value
    shown = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in applied.items())
    echo(f"preset {name}: {shown}" + (
        f" (given explicitly: {', '.join(f'{k}={v}' for k, v in kept.items())})" if kept else ""),
        err=True)
    return {"name": name, "applied": applied, "overridden": kept}


def record_preset(run: RunDir | None, preset: dict[str, Any] | None) -> None:
    """The preset a run was made with, in its run.json (``config.preset``)."""
    if run is not None and preset is not None:
        run.update_config({"preset": preset})


def threshold_text(agg: Mapping[str, Any]) -> str:
    """``γ < 0.0707 (sin; given 0.05 paper-code)``: the threshold applied, and as given."""
    value, form = agg["threshold"], agg.get("threshold_form")
    given = agg.get("threshold_given")
    shown = f"γ < {value:.4g}" + (f" ({form}" if form else "")
    if given and (given["form"] != form or given["value"] != value):
        shown += f"; given {given['value']:g} {given['form']}"
    return shown + (")" if form else "")


Opts = TypeVar("Opts")


def with_preset(options: Opts, command: str) -> tuple[Opts, dict[str, Any] | None]:
    """A command's options (a dataclass with a ``preset`` field) with its preset's settings
    where no option was given on the command line; prints what was applied (to stderr) and
    returns the record for run.json."""
    name = cast(str | None, cast(Any, options).preset)
    if name is None:
        return options, None
    context = click.get_current_context()
    applied: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    for key, value in PRESETS[name][command].items():
        if context.get_parameter_source(key) == click.core.ParameterSource.COMMANDLINE:
            kept[key] = getattr(options, key)
        else:
            applied[key] = value
    shown = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in applied.items())
    echo(f"preset {name}: {shown}" + (
        f" (given explicitly: {', '.join(f'{k}={v}' for k, v in kept.items())})" if kept else ""),
        err=True)
    return cast(Opts, replace(cast(Any, options), **applied)), {"name": name, "applied": applied,
                                                            "overridden": kept}
