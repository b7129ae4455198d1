"""Every command example in README.md and docs/ runs as written, and every output shown is the
output the commands print.

A page's ```bash blocks run in order, in one fresh folder per page (so a later block may use the
run directory an earlier one wrote), through bash with ``set -euo pipefail``, with this checkout's
``veracity`` first on PATH. An HTML comment on the lines just above a block changes how it runs:

- ``<!-- not-run: why -->``: the block is not run (the set-up command CI runs itself, the
  network, a paid API with nothing to stand in for it); the reason is required.
- ``<!-- run-with: A => B; C => D -->``: each A in the block is replaced by B before it runs (the
  fake model for the bundled one, a fixture for a full dataset, a mock server for yours). The
  substitutions are written next to the block, so a reader sees what the test changed.
- ``<!-- background: URL -->``: the block starts a server. It runs in the background; the page's
  next block starts once URL answers over HTTP (with a status below 500), and the server is stopped (SIGTERM
  to its process group) when the page is done.
- ``<!-- output -->`` above a ```text block: that block is how the standard output of the bash
  block before it ends (its last command's output; trailing spaces and blank lines ignored); a
  changed output fails the test. ``<!-- output: excerpt -->``: the block's lines appear, one
  after the other, somewhere in that output (for output whose last lines carry a timing).

Names a block or a substitution may use: ``$FIXTURES`` is this repository's ``tests/fixtures``,
``$REPO`` its root, ``$FREE_PORT`` a port free on 127.0.0.1 (the same one for the whole page;
``$FREE_PORT2``, ... more),
``$MOCK_UPSTREAM`` the base URL (``http://127.0.0.1:PORT/v1``) of the tests' mock
OpenAI-compatible server (``tests/mock_upstream.py``: a prompt containing "unstable" gets an
answer that depends on the characters appended to it, any other the same answer), started for
the page when a block first names it (``$MOCK_UPSTREAM2``, ...: more of them),
``$STABLE_UPSTREAM`` one that answers every prompt consistently ("unstable" ones too: a
stronger model for a policy to escalate to), and
``$DATA_MIRROR`` the address of an HTTP server on 127.0.0.1 serving ``tests/fixtures/data-mirror``
(the fixture files under the paths the catalogue names on raw.githubusercontent.com; with
``VERACITY_DATA_CATALOGUE`` naming the catalogue beside them, which differs from the bundled one
only in the files' sizes and checksums, ``veracity data get`` fetches and verifies them).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import IO

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DIRECTIVE = re.compile(
    r"<!--\s*(not-run|run-with|output|background)\s*(?::\s*(.*?))?\s*-->\s*$")
TIMEOUT = 900
"""Seconds a block gets before it counts as hung: a bench's --smoke run on a busy 2-core machine
takes up to five minutes (CI's own bench loop allows each 900 s too)."""
READY_TIMEOUT = 180
"""Seconds a background server gets to answer (loading the bundled model on a busy machine)."""


@dataclass
class Block:
    page: Path
    line: int
    text: str
    not_run: str | None = None
    substitutions: list[tuple[str, str]] = field(default_factory=list)
    background: str | None = None
    """The URL that answers once the server this block starts is up."""
    output: str | None = None
    """The ```text block marked ``<!-- output -->`` right after this one, if any."""
    excerpt: bool = False
    """The output block is a run of lines from the output, not its end."""

    def where(self) -> str:
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page
        return f"{page}:{self.line}"

    def substituted(self) -> str:
        text = self.text
        for old, new in self.substitutions:
            text = text.replace(old, new)
        return text

    def script(self, names: dict[str, str] | None = None) -> str:
        text = self.substituted()
        every = {"$FIXTURES": str(REPO / "tests" / "fixtures"), "$REPO": str(REPO), **(names or {})}
        for name, value in sorted(every.items(), reverse=True):  # $FREE_PORT2 before $FREE_PORT
            text = text.replace(name, value)
        return text


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
                if "background" in names:
                    block.background = names["background"]
                    assert block.background, f"{block.where()}: background needs a ready URL"
                blocks.append(block)
            elif "output" in names:
                assert blocks, f"{page}:{index + 1}: an output block follows no bash block"
                blocks[-1].output = body
                blocks[-1].excerpt = names["output"] == "excerpt"
                assert names["output"] in ("", "excerpt"), (
                    f"{page}:{index + 1}: output takes nothing or 'excerpt'")
            pending = []
            index = end + 1
            continue
        if line.strip():
            pending = []
        index += 1
    return blocks


def _normalise(text: str) -> str:
    """Trailing spaces and blank lines at either end dropped; the first line keeps its indent
    (an excerpt from inside indented output starts indented)."""
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError as error:
        return error.code < 500  # 401, 404: up; 503: not ready yet
    except (urllib.error.URLError, OSError):
        return False


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


class PageRun:
    """The folder, environment and servers one page's blocks share."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = dict(os.environ)
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO / "src"), self.env.get("PYTHONPATH")]))
        self.env.pop("OPENAI_API_KEY", None)
        self.names: dict[str, str] = {}
        self.servers: list[tuple[subprocess.Popen[str], Path]] = []
        self.mocks: list[subprocess.Popen[str]] = []
        self.mirror: ThreadingHTTPServer | None = None

    def script(self, block: Block) -> str:
        text = f"{block.substituted()}\n{block.background or ''}"  # names the URL uses, too
        for name in re.findall(r"\$FREE_PORT\d*", text):
            self.names.setdefault(name, str(_free_port()))
        for name in re.findall(r"\$(?:MOCK|STABLE)_UPSTREAM\d*", text):
            if name not in self.names:
                stable = ["--stable"] if name.startswith("$STABLE") else []
                mock = subprocess.Popen(
                    [sys.executable, str(REPO / "tests" / "mock_upstream.py"), "--delay", "0.01",
                     *stable], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                self.mocks.append(mock)
                assert mock.stdout is not None
                port = mock.stdout.readline().split()[1]
                self.names[name] = f"http://127.0.0.1:{port}/v1"
        if "$DATA_MIRROR" in text and "$DATA_MIRROR" not in self.names:
            self.names["$DATA_MIRROR"] = self._start_mirror()
        return block.script(self.names)

    def _start_mirror(self) -> str:
        class Quiet(SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

        handler = partial(Quiet, directory=str(REPO / "tests" / "fixtures" / "data-mirror"))
        self.mirror = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        Thread(target=self.mirror.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.mirror.server_address[1]}"

    def run(self, block: Block) -> None:
        script = self.script(block)
        if block.background is not None:
            self.start(block, script)
            return
        process = subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + script],
                                   cwd=self.folder, env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the commands the block started, too
            process.communicate()
            raise AssertionError(f"{block.where()} took over {TIMEOUT} s:\n{script}") from None
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        assert result.returncode == 0, (
            f"{block.where()} failed (exit {result.returncode}):\n{script}\n"
            f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")
        if block.output is not None:
            printed, shown = _normalise(result.stdout), _normalise(block.output)
            found = (f"\n{shown}\n" in f"\n{printed}\n" if block.excerpt
                     else printed.endswith(shown))
            assert found, (f"{block.where()}: the output shown is not what the commands print:\n"
                           f"{result.stdout}")

    def start(self, block: Block, script: str) -> None:
        log = self.folder / f"background-{block.line}.log"
        with log.open("w", encoding="utf-8") as sink:
            process = subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + script],
                                       cwd=self.folder, env=self.env, stdout=sink,
                                       stderr=subprocess.STDOUT, text=True,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        self.servers.append((process, log))
        url = self._expand(block.background or "")
        deadline = time.monotonic() + READY_TIMEOUT
        while not _answers(url):
            assert process.poll() is None, (
                f"{block.where()} stopped before {url} answered (exit {process.returncode}):\n"
                f"{script}\n--- output\n{log.read_text(encoding='utf-8')[-3000:]}")
            assert time.monotonic() < deadline, (
                f"{block.where()}: {url} did not answer within {READY_TIMEOUT} s:\n"
                f"{log.read_text(encoding='utf-8')[-3000:]}")
            time.sleep(0.2)

    def _expand(self, text: str) -> str:
        for name, value in sorted(self.names.items(), reverse=True):  # $FREE_PORT2 first
            text = text.replace(name, value)
        return text

    def close(self) -> None:
        """Stop every server and mock, then say which server had failed (stopping all first:
        a failed check must leave no process behind)."""
        for process, _ in reversed(self.servers):
            _stop(process)
        if self.mirror is not None:
            self.mirror.shutdown()
            self.mirror.server_close()
        for mock in self.mocks:
            stdin: IO[str] | None = mock.stdin
            if stdin is not None:
                stdin.close()
            try:
                mock.wait(timeout=30)
            except subprocess.TimeoutExpired:
                mock.kill()
                mock.wait()
        for process, log in self.servers:
            assert process.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM), (
                f"a background server ended with exit {process.returncode}:\n"
                f"{log.read_text(encoding='utf-8')[-3000:]}")


@pytest.fixture
def page_run(tmp_path: Path) -> Iterator[PageRun]:
    run = PageRun(tmp_path)
    try:
        yield run
    finally:
        run.close()


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_example_runs_as_written(page: Path, page_run: PageRun) -> None:
    blocks = parse(page)
    if not blocks:
        pytest.skip("no command examples on this page")
    for block in blocks:
        if block.not_run is None:
            page_run.run(block)


def test_the_directives_are_read(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("<!-- run-with: big => small; a.csv => $FIXTURES/x.csv -->\n```bash\n"
                    "veracity big a.csv\n```\n<!-- output -->\n```text\nhello\n```\n\n"
                    "<!-- not-run: starts a server -->\n```bash\nveracity serve\n```\n"
                    "<!-- not-run: stale -->\n\nprose between\n```bash\necho hi\n```\n"
                    "<!-- background: http://127.0.0.1:$FREE_PORT/healthz -->\n"
                    "<!-- run-with: 8000 => $FREE_PORT -->\n```bash\nserve --port 8000\n```\n",
                    encoding="utf-8")
    first, second, third, fourth = parse(page)
    assert first.substitutions == [("big", "small"), ("a.csv", "$FIXTURES/x.csv")]
    assert first.script() == f"veracity small {REPO / 'tests' / 'fixtures'}/x.csv"
    assert first.output == "hello"
    assert second.not_run == "starts a server"
    assert third.not_run is None  # a directive separated by prose applies to nothing
    assert fourth.background == "http://127.0.0.1:$FREE_PORT/healthz"
    assert fourth.script({"$FREE_PORT": "1234"}) == "serve --port 1234"


def test_a_background_block_serves_the_next_and_is_stopped(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "<!-- background: http://127.0.0.1:$FREE_PORT/ -->\n```bash\n"
        "python -m http.server $FREE_PORT --bind 127.0.0.1\n```\n"
        "```bash\ncurl -sf http://127.0.0.1:$FREE_PORT/ > /dev/null && echo served\n```\n"
        "<!-- output -->\n```text\nserved\n```\n", encoding="utf-8")
    run = PageRun(tmp_path)
    try:
        for block in parse(page):
            run.run(block)
        (server, _), = run.servers
        assert server.poll() is None
    finally:
        run.close()
    assert server.poll() is not None
    wrong = tmp_path / "q.md"
    wrong.write_text("```bash\necho something else\n```\n<!-- output -->\n```text\nserved\n```\n",
                     encoding="utf-8")
    with pytest.raises(AssertionError, match="not what the commands print"):
        PageRun(tmp_path).run(parse(wrong)[0])


def test_an_excerpt_is_a_run_of_whole_lines(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("```bash\nprintf 'a\\nb c\\nd\\n'\n```\n<!-- output: excerpt -->\n"
                    "```text\nb c\n```\n```bash\nprintf 'a\\nb c\\nd\\n'\n```\n"
                    "<!-- output: excerpt -->\n```text\nb\n```\n", encoding="utf-8")
    whole, part = parse(page)
    assert whole.excerpt and part.excerpt
    run = PageRun(tmp_path)
    run.run(whole)
    with pytest.raises(AssertionError, match="not what the commands print"):
        run.run(part)
    indented = tmp_path / "q.md"
    indented.write_text("```bash\nprintf '{\\n    \"a\": 1\\n}\\n'\n```\n<!-- output: excerpt -->\n"
                        "```text\n    \"a\": 1\n```\n```bash\nprintf '{\\n\"a\": 1\\n}\\n'\n```\n"
                        "<!-- output: excerpt -->\n```text\n    \"a\": 1\n```\n", encoding="utf-8")
    nested, flat = parse(indented)
    run.run(nested)  # the indent is part of the line
    with pytest.raises(AssertionError, match="not what the commands print"):
        run.run(flat)


def test_the_fixture_catalogue_differs_from_the_bundled_one_only_in_checksums() -> None:
    """The data examples' substitution swaps the bytes checked, nothing else: same names,
    addresses (so the same paths on the mirror), spec and notes."""
    import json

    from veracity.data.catalogue import catalogue, digests

    fixture = REPO / "tests" / "fixtures" / "data-mirror"
    bundled = {d.name: d for d in catalogue()}
    for entry in json.loads((fixture / "catalogue.json").read_text(encoding="utf-8"))["datasets"]:
        real = bundled[entry["name"]]
        files = entry.pop("files")
        assert entry == {k: v for k, v in vars(real).items() if k != "files"}
        assert [f["url"] for f in files] == [f.url for f in real.files]
        assert [f["path"] for f in files] == [f.path for f in real.files]
        for file in files:
            served = fixture / file["url"].removeprefix("https://raw.githubusercontent.com/")
            got = digests(served)
            assert (got.size, got.sha256) == (file["size"], file["sha256"])


def test_the_readme_set_up_and_test_commands_are_what_ci_runs() -> None:
    """The two README blocks the test cannot run as written (a fresh virtual environment and
    an install; the whole suite): CI's script runs the test command, line for line, and the
    set-up's install is one CI's covers, so only its run part is left to the README's test,
    which runs it with the install substituted away."""
    blocks = parse(REPO / "README.md")
    tests = [b for b in blocks if b.not_run is not None]
    assert [b.text for b in tests] == [
        'python3 -m venv .venv && .venv/bin/pip install -e ".[all,dev]" && .venv/bin/pytest']
    # and it is the only example anywhere that the page test does not run
    assert [b.where() for page in PAGES for b in parse(page) if b.not_run] == [tests[0].where()]
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert tests[0].text in ci
    setup = next(b for b in blocks if ".venv/bin/veracity" in b.text)
    install = re.match(r'python3 -m venv \.venv && \.venv/bin/pip install -e "\.\[(\w+)\]" && '
                       r'\.venv/bin/veracity ', setup.text)
    assert install, setup.text
    assert setup.substitutions[0] == (install.group(0).strip(), "veracity")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["optional-dependencies"]
    covered, todo = set(), ["all"]
    while todo:  # the extras "all" pulls in, through veracity[...] references
        extra = todo.pop()
        covered.add(extra)
        for spec in extras[extra]:
            for group in re.findall(r"veracity\[([\w,]+)\]", spec):
                todo += [name for name in group.split(",") if name not in covered]
    assert install.group(1) in covered
