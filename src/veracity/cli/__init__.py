"""The ``veracity`` command line: thin wrappers over the library.

Each registered method brings its commands (a command may join another method's group);
the commands below belong to the shell and its integrations.
"""

from __future__ import annotations

import click

from veracity import crash
from veracity.method import Command, load_target, methods

SHELL = (
    Command("veracity.cli.misc:report"),
    Command("veracity.cli.misc:models"),
    Command("veracity.cli.misc:cache"),
    Command("veracity.serve.cli:serve"),
    Command("veracity.cli.doctor:doctor"),
    Command("veracity.cli.data:data"),
)


class VeracityGroup(click.Group):
    """The ``veracity`` group: its commands come from the method registry on first use, so
    importing a method's command module (which uses this package's options) never loops."""

    _mounted = False

    def _mount(self) -> None:
        if self._mounted:
            return
        self._mounted = True
        commands = [c for m in methods() for c in m.commands] + list(SHELL)
        # top-level commands first, then those joining a group one of them made
        for command in sorted(commands, key=lambda c: c.group != ""):
            parent = self if not command.group else self.commands.get(command.group)
            if not isinstance(parent, click.Group):
                raise click.ClickException(f"{command.target} joins '{command.group}', "
                                           "which is no command group")
            parent.add_command(load_target(command.target))

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._mount()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._mount()
        return super().get_command(ctx, cmd_name)


@click.group(cls=VeracityGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="veracity")
def main() -> None:
    """Measure how far an LLM's answers can be trusted."""
    crash.arm()  # a segfault in native code prints where it happened
