"""The ``veracity`` command line: thin wrappers over the library."""

from __future__ import annotations

import click

import veracity.cli.fewl_train  # noqa: F401  (adds fewl icl and fewl finetune)
from veracity.cli.attack import attack, isotropy
from veracity.cli.calibrate import calibrate_command
from veracity.cli.deception import deception
from veracity.cli.fewl import fewl
from veracity.cli.gamma import gamma
from veracity.cli.misc import cache, models, report
from veracity.cli.serve import serve
from veracity.cli.validate import annotate, validate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="veracity")
def main() -> None:
    """Measure how far an LLM's answers can be trusted."""


main.add_command(gamma)
main.add_command(attack)
main.add_command(isotropy)
main.add_command(deception)
main.add_command(fewl)
main.add_command(report)
main.add_command(models)
main.add_command(cache)
main.add_command(validate)
main.add_command(annotate)
main.add_command(serve)
main.add_command(calibrate_command)
