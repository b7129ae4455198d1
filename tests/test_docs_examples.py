"""Every command example in README.md and docs/ runs as written, and every output shown is the
output the commands print.

A page's ```bash blocks run in order, in one fresh folder per page (so a later block may use the
run directory an earlier one wrote), through bash with ``set -euo pipefail``, with this checkout's
``veracity`` first on PATH. An HTML comment on the lines just above a block changes how it runs:

- ``<!-- not-run: why -->``: the block is not run (a server that must stay up, a paid API, a
  multi-hour job); the reason is required.
- ``<!-- run-with: A => B; C => D -->``: each A in the block is replaced by B before it runs (the
  fake model for the bundled one, a fixture for a full dataset). The substitutions are written
  next to the block, so a reader sees what the test changed.
- ``<!-- output -->`` above a ```text block: that block is how the standard output of the bash
  block before it ends (its last command's output; trailing spaces and blank lines ignored); a
  changed output fails the test.

``$FIXTURES`` in a substitution is this repository's ``tests/fixtures``; ``$REPO`` its root.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DIRECTIVE = re.compile(r"<!--\s*(not-run|run-with|output)\s*(?::\s*(.*?))?\s*-->\s*$")
TIMEOUT = 300


@dataclass
class Block:
    page: Path
    line: int
    text: str
    not_run: str | None = None
    substitutions: list[tuple[str, str]] = field(default_factory=list)
    output: str | None = None
    """The ```text block marked ``<!-- output -->`` right after this one, if any."""

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def script(self) -> str:
        text = self.text
        for old, new in self.substitutions:
            text = text.replace(old, new)
        return text.replace("$FIXTURES", str(REPO / "tests" / "fixtures")).replace(
            "$REPO", str(REPO))


def parse(page: Path) -> list[Block]:
    """The page's bash blocks with their directives."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: list[tuple[str, str]] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        match = DIRECTIVE.match(line.strip())
        if match:
            pending.append((match.group(1), match.group(2) or ""))
            index += 1
            continue
        fence = re.match(r"^(\s*)```(\w*)", line)
        if fence:
            kind = fence.group(2)
            end = index + 1
            while end < len(lines) and not lines[end].strip().startswith("```"):
                end += 1
            body = "\n".join(lines[index + 1:end])
            names = dict(pending)
            if kind == "bash":
                block = Block(page, index + 1, body)
                if "not-run" in names:
                    block.not_run = names["not-run"]
                    assert block.not_run, f"{block.where()}: not-run needs a reason"
                for pair in filter(None, (p.strip() for p in names.get("run-with", "").split(";"))):
                    old, sep, new = pair.partition("=>")
                    assert sep, f"{block.where()}: run-with takes 'A => B' pairs, got {pair!r}"
                    block.substitutions.append((old.strip(), new.strip()))
                blocks.append(block)
            elif "output" in names:
                assert blocks, f"{page}:{index + 1}: an output block follows no bash block"
                blocks[-1].output = body
            pending = []
            index = end + 1
            continue
        if line.strip():
            pending = []
        index += 1
    return blocks


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_example_runs_as_written(page: Path, tmp_path: Path) -> None:
    blocks = parse(page)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.pop("OPENAI_API_KEY", None)
    ran = 0
    for block in blocks:
        if block.not_run is not None:
            continue
        result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + block.script()],
                                cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, (
            f"{block.where()} failed (exit {result.returncode}):\n{block.script()}\n"
            f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")
        if block.output is not None:
            assert _normalise(result.stdout).endswith(_normalise(block.output)), (
                f"{block.where()}: the output shown is not what the commands print:\n"
                f"{result.stdout}")
        ran += 1
    if not blocks:
        pytest.skip("no command examples on this page")


def test_the_directives_are_read(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("<!-- run-with: big => small; a.csv => $FIXTURES/x.csv -->\n```bash\n"
                    "veracity big a.csv\n```\n<!-- output -->\n```text\nhello\n```\n\n"
                    "<!-- not-run: starts a server -->\n```bash\nveracity serve\n```\n"
                    "<!-- not-run: stale -->\n\nprose between\n```bash\necho hi\n```\n",
                    encoding="utf-8")
    first, second, third = parse(page)
    assert first.substitutions == [("big", "small"), ("a.csv", "$FIXTURES/x.csv")]
    assert first.script() == f"veracity small {REPO / 'tests' / 'fixtures'}/x.csv"
    assert first.output == "hello"
    assert second.not_run == "starts a server"
    assert third.not_run is None  # a directive separated by prose applies to nothing
