"""A payload corpus (markup, URLs, terminal escapes, bidi overrides, formula cells) through every
report, rating sheet and terminal table, on the fake backends."""

from __future__ import annotations

import csv
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.text import csv_cell, csv_uncell, terminal_safe

PAYLOADS = (
    "<script>alert('x')</script>",
    "\"><img src=x onerror=alert(1)>",
    "' onmouseover='alert(1)",
    "javascript:alert(document.cookie)",
    "</textarea><script>alert(2)</script>",
    "</script><script>alert(3)</script>",
    "abc\u202edcba\u2066x\u2069",
    "\x1b]0;pwned\x07\x1b[31mred\x1b[0m",
    "\x9b31mc1\x9d",
    "=HYPERLINK(\"http://evil\",\"x\")",
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1+1)*cmd|' /C calc'!A0",
)
FAKE = ["--embedder", "hash/default", "--no-cache", "-q"]
pytestmark = pytest.mark.filterwarnings("ignore:Glyph.*missing from font")  # spelled-out controls
RAW = ("\x1b", "\x9b", "\x9d", "\x07", "\u202e", "\u2066", "\u2069")


class _Markup(HTMLParser):
    """Collects what a browser would run (attributes, the text of script elements) and the
    report's data blocks (``<script type="application/json">``, which no browser runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.attributes: list[tuple[str, str | None]] = []
        self.scripts: list[str] = []
        self.data_blocks: list[str] = []
        self._open: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attributes.extend(attrs)
        self._open = None
        if tag == "script":
            self._open = self.data_blocks if ("type", "application/json") in attrs else self.scripts
            self._open.append("")

    def handle_endtag(self, tag: str) -> None:
        self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open[-1] += data


def assert_harmless_html(path: Path) -> None:
    """No payload became markup: scripts and event handlers are only our own (no alert), no
    javascript: URL, images are embedded PNGs, no raw control or bidi character."""
    text = path.read_text(encoding="utf-8")
    markup = _Markup()
    markup.feed(text)
    assert not [s for s in markup.scripts if "alert" in s], path
    for block in markup.data_blocks:  # data only: nothing in it can close the block or open a tag
        assert not set("<>&") & set(block), path
        json.loads(block)
    for name, value in markup.attributes:
        if name.startswith("on"):
            assert value == "download()", (path, name, value)
        if name in ("href", "src", "action", "formaction", "xlink:href"):
            assert not (value or "").strip().lower().startswith("javascript:"), (path, value)
        if name == "src":
            assert (value or "").startswith("data:image/png;base64,"), (path, value)
    for char in RAW:
        assert char not in text, (path, repr(char))
    assert "</textarea><script>" not in text


def assert_harmless_terminal(output: str) -> None:
    for char in RAW:
        assert char not in output, repr(char)


def invoke(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert_harmless_terminal(result.output)
    return result.output


@pytest.fixture
def questions(tmp_path: Path) -> Path:
    path = tmp_path / "payloads.jsonl"
    path.write_text("".join(json.dumps({"id": p[:20], "question": f"Q {p}", "answer": p}) + "\n"
                            for p in PAYLOADS), encoding="utf-8")
    return path


def test_gamma_table_report_and_rating_sheets(tmp_path: Path, questions: Path) -> None:
    run = tmp_path / "gamma"
    out = invoke("gamma", "--dataset", f"jsonl:{questions}", "--model", "fake/echo", "-n", "2",
                 *FAKE, "--out", str(run))
    assert "pwned" in out and "\\u202e" in out  # shown, spelled out
    assert_harmless_html(run / "report.html")
    invoke("annotate", "export", str(run), "--out", str(tmp_path / "sheet.html"))
    assert_harmless_html(tmp_path / "sheet.html")
    invoke("annotate", "export", str(run), "--out", str(tmp_path / "sheet.csv"))
    with (tmp_path / "sheet.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    cells = [cell for row in rows for cell in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert any(c.startswith("'=HYPERLINK") for c in cells)
    # a filled-in sheet (item ids neutralised too) reads back against the run
    rated = tmp_path / "rater.csv"
    with rated.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(rows[0])
        writer.writerows([*row[:5], "3", "", ""] for row in rows[1:])
    invoke("annotate", "import", str(run), str(rated))
    assert_harmless_html(run / "report.html")
    invoke("validate", "gamma", str(run), "--baseline-samples", "0", "--resamples", "100",
           "--embedder", "hash/default", "--no-cache")
    report = (run / "report.html").read_text(encoding="utf-8")
    assert "Validation against labels" in report and "Human ratings" in report
    assert_harmless_html(run / "report.html")
    assert json.loads((run / "ratings.json").read_text())["n_rated"] == len(PAYLOADS)


def test_deception_table_and_report(tmp_path: Path) -> None:
    source = tmp_path / "mc.jsonl"
    source.write_text("".join(json.dumps({
        "question": f"Q {p}", "options": [p, "b", "c", "d"], "answer": "A", "subject": p[:30],
        "misleading_start": f"Clearly {p}", "id": f"s/{k}"}) + "\n" for k, p in enumerate(PAYLOADS)),
        encoding="utf-8")
    run = tmp_path / "deception"
    invoke("deception", "run", "-m", "fake/deceive", "--dataset", f"mc-jsonl:{source}",
           "--no-cache", "--out", str(run))
    assert_harmless_html(run / "report.html")


def test_fewl_attack_and_isotropy(tmp_path: Path, questions: Path) -> None:
    fewl = tmp_path / "fewl"
    invoke("fewl", "run", "--dataset", f"jsonl:{questions}", "--answers", "fake/echo",
           "--reference", "fake/pairs", "--pairs", "2", "--neighbours", "2", "--similarity",
           "hash/default", "--no-cache", "--out", str(fewl))
    assert_harmless_html(fewl / "report.html")
    attack = tmp_path / "attack"
    invoke("attack", "--prompt", PAYLOADS[7] + PAYLOADS[0], "--model", "fake/echo", "--steps",
           "2", "-n", "2", *FAKE, "--out", str(attack))
    assert_harmless_html(attack / "report.html")
    iso = tmp_path / "iso"
    invoke("isotropy", "--dataset", f"jsonl:{questions}", "--model", "fake/echo", "-n", "2",
           *FAKE, "--out", str(iso))
    assert_harmless_html(iso / "report.html")
    invoke("report", str(fewl), str(attack), str(iso), "--out", str(tmp_path / "all.html"))
    assert_harmless_html(tmp_path / "all.html")


def test_errors_naming_bad_data_are_harmless_too(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": 3, "\x1b[2J": 1}) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["gamma", "--dataset", f"jsonl:{bad}", *FAKE,
                                       "--question-field", "\x1b[2J\u202e"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert_harmless_terminal(result.output)


@pytest.mark.parametrize("value", ["=1", "'=1", "''+x", "-", "@", "\tx", "plain", "'plain", ""])
def test_csv_neutralising_is_reversible(value: str) -> None:
    cell = csv_cell(value)
    assert not re.match(r"[=+\-@\t\r]", cell)
    assert csv_uncell(cell) == value


def test_terminal_safe_spells_out_everything_that_moves_a_terminal() -> None:
    assert terminal_safe("a\x1b[2Jb\u202ec\x9bd\ud800") == "a\\x1b[2Jb\\u202ec\\x9bd\\ud800"
    assert terminal_safe("line\nnext", keep_newlines=True) == "line\nnext"


def test_credentials_in_base_url_never_reach_the_run_folder(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from mock_openai import MockOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run = tmp_path / "run"
    with MockOpenAI() as server:
        url = server.url.replace("http://", "http://alice:s3cr3t-token@")
        out = invoke("gamma", "What is 2+2?", "--model", "openai/test-model", "--base-url", url,
                     *FAKE, "-n", "2", "--out", str(run))
    assert server.received, "the server was really called"
    for path in run.iterdir():
        text = path.read_text(encoding="utf-8")
        assert "s3cr3t-token" not in text, path.name
    assert "REDACTED" in (run / "run.json").read_text(encoding="utf-8")
    assert "s3cr3t-token" not in out


def test_redact_url_drops_user_info_and_key_parameters() -> None:
    from veracity.text import redact_url, redact_urls

    assert redact_url("https://u:tok@host:8/v1?api_key=k&x=1") == \
        "https://REDACTED@host:8/v1?api_key=REDACTED&x=1"
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert redact_urls("failed: https://a:b@h/v1 (500)") == "failed: https://REDACTED@h/v1 (500)"
