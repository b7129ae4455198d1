"""The ``veracity`` command line: thin wrappers over the library."""

from __future__ import annotations

import click

import veracity.cli.fewl_annotate  # noqa: F401  (adds fewl annotate export / import)
import veracity.cli.fewl_train  # noqa: F401  (adds fewl icl and fewl finetune)
from veracity import crash
from veracity.cli.calibrate import calibrate_command
from veracity.cli.doctor import doctor
from veracity.cli.misc import cache, models, report
from veracity.cli.serve import serve
from veracity.cli.validate import annotate, validate
from veracity.methods.base import methods


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="veracity")
def main() -> None:
    """Measure how far an LLM's answers can be trusted."""
    crash.arm()  # a segfault in native code prints where it happened


for _method in methods():  # each registered method brings its command
    if (_command := _method.command()) is not None:
        main.add_command(_command, _method.name)
main.add_command(report)
main.add_command(models)
main.add_command(cache)
main.add_command(validate)
main.add_command(annotate)
main.add_command(serve)
main.add_command(calibrate_command)
main.add_command(doctor)
