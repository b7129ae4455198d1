"""What every γ command shares on the command line: the default model and embedder, and the
settings of a publication (``--preset paper``) applied where no option was given."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

import click

from veracity.cli.output import echo
from veracity.jsontypes import JsonObject, JsonValue
from veracity.store import RunDir

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_MODEL = "llamacpp/default"
DEFAULT_EMBEDDER = "st/default"
TABLE10_STEPS = 26
"""Groups appended to the prompt in the last row of the γ paper's Table 10."""
TABLE10_MAX_CODE = 0xC6D
"""The largest code point among them (printed "\xc6d", read as U+0C6D)."""
TABLE10_CHARSET = f"utf8:0-{TABLE10_MAX_CODE}"
Settings = Mapping[str, JsonValue]
"""Option name (a field of the command's options dataclass) to value."""
PRESETS: dict[str, dict[str, Settings]] = {
    "paper": {
        # §3-4: N = 10 ASCII control-character ball points, temperature 0 (always), answers up
        # to 1,024 tokens, γ in the authors' sqrt(1 - cos) form with Table 8's 0.05
        "gamma": {"n": 10, "ball": "ascii-control", "form": "paper-code", "max_tokens": 1024,
                  "threshold": 0.05, "threshold_form": "paper-code"},
        "isotropy": {"n": 10, "ball": "ascii-control", "max_tokens": 1024},
        # §5: candidates and their γ balls from random UTF-8, as the authors' walker draws both;
        # Table 10's last prompt carries 26 appended groups (26 steps) whose code points reach
        # U+0C6D (its "\xc6d"), beyond the authors' code's 500: the range runs up to there
        "attack": {"n": 10, "steps": TABLE10_STEPS, "charset": TABLE10_CHARSET,
                   "ball": TABLE10_CHARSET, "form": "paper-code", "max_tokens": 1024},
        # §4: 100 randomly sampled questions per model x corpus are rated
        "annotate export": {"sample": 100},
    },
}
"""Named bundles of settings; ``--preset NAME`` applies one, explicit options still win."""


@dataclass(frozen=True)
class PresetRecord:
    """A preset as a run was made with it: what it set, and what was given explicitly."""

    name: str
    applied: Settings
    overridden: Settings

    def to_json(self) -> JsonObject:
        return {"name": self.name, "applied": dict(self.applied),
                "overridden": dict(self.overridden)}


def preset_option(command: str) -> Callable[[F], F]:
    """``--preset paper`` for ``command`` (a key of each preset)."""
    shown = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in PRESETS["paper"][command].items())
    return click.option("--preset", type=click.Choice(sorted(PRESETS)), default=None,
                        help=f"Settings of a publication: paper = Kersting et al. 2024 ({shown}); "
                             "options given explicitly still win. Recorded in run.json.")


def record_preset(run: RunDir | None, preset: PresetRecord | None) -> None:
    """The preset a run was made with, in its run.json (``config.preset``)."""
    if run is not None and preset is not None:
        run.update_config({"preset": preset.to_json()})


Opts = TypeVar("Opts")


def with_preset(options: Opts, command: str) -> tuple[Opts, PresetRecord | None]:
    """A command's options (a dataclass with a ``preset`` field) with its preset's settings
    where no option was given on the command line; prints what was applied (to stderr) and
    returns the record for run.json."""
    name = cast(str | None, cast(Any, options).preset)
    if name is None:
        return options, None
    context = click.get_current_context()
    applied: JsonObject = {}
    kept: JsonObject = {}
    for key, value in PRESETS[name][command].items():
        if context.get_parameter_source(key) == click.core.ParameterSource.COMMANDLINE:
            kept[key] = getattr(options, key)
        else:
            applied[key] = value
    shown = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in applied.items())
    echo(f"preset {name}: {shown}" + (
        f" (given explicitly: {', '.join(f'{k}={v}' for k, v in kept.items())})" if kept else ""),
        err=True)
    return (cast(Opts, replace(cast(Any, options), **applied)),
            PresetRecord(name, applied, kept))
