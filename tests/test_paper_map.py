"""docs/gamma-paper.md stays true: every command it names exists, with every option it uses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from veracity.cli import main

MAP = Path(__file__).resolve().parents[1] / "docs" / "gamma-paper.md"


def commands() -> list[tuple[str, list[str]]]:
    """(paper item, argv after ``veracity``) for each row of the map's table."""
    rows = []
    for line in MAP.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("`veracity "):
            continue
        rows.append((cells[0], shlex.split(cells[1].strip("`"))[1:]))
    return rows


def test_the_map_covers_the_issue_items() -> None:
    items = " ".join(item for item, _ in commands())
    for name in ("Algorithm 1", "Table 5", "Table 6", "Table 8", "Figure 1", "Figures 3–4",
                 "§5"):
        assert name in items, name


@pytest.mark.parametrize("item, argv", commands(), ids=[item for item, _ in commands()])
def test_every_command_and_option_exists(item: str, argv: list[str]) -> None:
    command: click.Command = main
    words = list(argv)
    while isinstance(command, click.Group):
        name = words.pop(0)
        found = command.get_command(click.Context(command), name)
        assert found is not None, f"{item}: no command {name}"
        command = found
    known = {opt for param in command.params for opt in param.opts + param.secondary_opts}
    flags = [w.split("=")[0] for w in words if re.match(r"-{1,2}[a-z]", w)]
    assert flags, item
    for flag in flags:
        assert flag in known, f"{item}: {flag} is not an option of {command.name}"
    choices = {opt: param.type.choices for param in command.params for opt in param.opts
               if isinstance(param.type, click.Choice)}
    for flag, value in zip(words, words[1:], strict=False):
        if flag in choices:
            assert value in choices[flag], f"{item}: {flag} {value}"


def _numbers(text: str, word: str) -> set[int]:
    """Every number the text gives to ``word`` (Table / Figure), ranges like 3–4 included."""
    found: set[int] = set()
    for match in re.finditer(rf"{word}s? (\d+)(?:[–-](\d+))?", text):
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        found.update(range(first, last + 1))
    return found


def test_every_table_and_figure_is_mapped_or_named_as_not_mapped() -> None:
    text = MAP.read_text(encoding="utf-8")
    mapped = " ".join(item for item, _ in commands())
    rest = text[text.index("Not mapped here"):]
    tables, figures = _numbers(mapped + rest, "Table"), _numbers(mapped + rest, "Figure")
    assert set(range(1, 11)) <= tables, sorted(set(range(1, 11)) - tables)
    assert set(range(1, 5)) <= figures, sorted(set(range(1, 5)) - figures)
    assert not _numbers(mapped, "Table") & _numbers(rest, "Table")  # mapped or not, never both
