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
    rest = text[text.index("Not mapped here"):].split("\n\n")[0]  # that paragraph
    tables, figures = _numbers(mapped + rest, "Table"), _numbers(mapped + rest, "Figure")
    assert set(range(1, 11)) <= tables, sorted(set(range(1, 11)) - tables)
    assert set(range(1, 5)) <= figures, sorted(set(range(1, 5)) - figures)
    assert not _numbers(mapped, "Table") & _numbers(rest, "Table")  # mapped or not, never both


PAPER_MAP = MAP.parent / "paper-map.md"
# every table, figure and numbered artefact of each paper (read from the papers' own captions)
EXPECTED = {
    "γ": {"Table": set(range(1, 15)), "Figure": set(range(1, 5)), "Algorithm": {1}},
    "DB-MMLU": {"Table": {1, 2, 3}, "Figure": {1, 2, 3}, "Figure A": set(range(1, 22)),
                "Listing": {1, 2}},
    "FEWL": {"Table": set(range(1, 11)), "Figure": set(range(1, 5)), "Algorithm": {1},
             "C.": {1, 3, 10, 11}},
}


def map_sections() -> dict[str, list[tuple[str, str, str]]]:
    """Paper -> (item, command cell, what differs) for each row of the paper map."""
    sections: dict[str, list[tuple[str, str, str]]] = {}
    current = ""
    for line in PAPER_MAP.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = line[3:].split(":")[0].strip()
            sections[current] = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if current and len(cells) == 3 and cells[0] not in ("paper item", "---"):
            sections[current].append((cells[0], cells[1], cells[2]))
    return sections


def _mapped(items: str, word: str) -> set[int]:
    """Numbers the items give to ``word`` (Table, Figure A, C.), ranges like 12–14 included."""
    found: set[int] = set()
    prefix = "A" if word == "Figure A" else ""
    for match in re.finditer(rf"{re.escape(word)}s? ?(\d+)(?:\s*[–-]\s*{prefix}(\d+))?", items):
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        found.update(range(first, last + 1))
    return found


def test_the_paper_map_lists_every_table_and_figure_of_each_paper() -> None:
    sections = map_sections()
    assert set(sections) == set(EXPECTED)
    for paper, kinds in EXPECTED.items():
        items = " ".join(item for item, _, _ in sections[paper])
        for word, numbers in kinds.items():
            if word == "Figure A":
                found = _mapped(items.replace("Figures A", "Figure A"), word)
            else:
                found = _mapped(re.sub(r"Figures? A\d+(–A\d+)?", "", items), word)
            assert numbers <= found, (paper, word, sorted(numbers - found))


def test_every_row_says_what_differs_and_names_a_command_or_why_not() -> None:
    for paper, rows in map_sections().items():
        for item, command, differs in rows:
            assert differs, (paper, item)
            assert command == "—" or command.startswith("`veracity "), (paper, item, command)


def _map_commands() -> list[tuple[str, list[str]]]:
    return [(f"{paper}: {item}", shlex.split(command.strip("`"))[1:])
            for paper, rows in map_sections().items() for item, command, _ in rows
            if command.startswith("`veracity ")]


@pytest.mark.parametrize("item, argv", _map_commands(), ids=[i for i, _ in _map_commands()])
def test_every_paper_map_command_and_option_exists(item: str, argv: list[str]) -> None:
    test_every_command_and_option_exists(item, argv)
