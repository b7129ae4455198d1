"""The Method registry: built-in methods, and a third-party method added by an entry point
alone (its own module and one registration; nothing in veracity edited)."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity import method as base
from veracity.method import Method, get_method, method_names
from veracity.methods.deception.records import DeceptionRecord
from veracity.methods.fewl.records import FewlRecord
from veracity.methods.gamma.attack.records import AttackStep
from veracity.methods.gamma.isotropy.records import IsotropyRecord
from veracity.methods.gamma.records import GammaRecord
from veracity.report import build_report
from veracity.store import RunDir, check_run_target, run_files

PLUGIN = '''
"""A third-party method: the length of each answer."""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from veracity.method import Command, MethodSpec, ReportSection
from veracity.records import Record, json_object
from veracity.report.html import esc
from veracity.runs.driver import save_run
from veracity.runs.result import RunResult


@dataclass(frozen=True)
class LengthRecord(Record):
    id: str
    length: int
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, data):
        row = json_object(data, "length record")
        return cls(str(row["id"]), int(row["length"]))

    def to_json(self):
        return {"id": self.id, "length": self.length}


def run_length(answers, out=None):
    records = [LengthRecord(str(i), len(a)) for i, a in enumerate(answers)]
    results = {"method": "char-length", "mean": sum(len(a) for a in answers) / len(answers)}
    return save_run(out, "char-length", {"n": len(answers)}, records, results,
                    files={"lengths.jsonl": [r.to_json() for r in records]})


@click.command()
@click.argument("answers", nargs=-1)
@click.option("--out", type=click.Path())
def command(answers, out):
    """Mean answer length."""
    click.echo(f"mean length {run_length(list(answers), out).results['mean']}")


def section(runs):
    return "".join(f"<p>mean length {esc(str(r.results['mean']))}</p>" for r in runs)


METHOD = MethodSpec("char-length", "Answer length", "length_method:LengthRecord",
                    (ReportSection("length_method:section"),), higher_is_better=False,
                    primary_metric="length", commands=(Command("length_method:command"),),
                    run_files=("lengths.jsonl",))
'''


class Messages(logging.Handler):
    """Every message logged to the logger it is attached to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def plugin_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[Messages]:
    """The registry's log, read at the logger itself: libraries configured by earlier tests
    (dictConfig, logging.disable, propagate, levels) cannot hide a message from it."""
    logger = logging.getLogger("veracity.method")
    monkeypatch.setattr(logger, "disabled", False)
    level, disabled = logger.level, logging.root.manager.disable
    logger.setLevel(logging.WARNING)
    logging.disable(logging.NOTSET)
    messages = Messages()
    logger.addHandler(messages)
    try:
        yield messages
    finally:
        logger.removeHandler(messages)
        logger.setLevel(level)
        logging.disable(disabled)


@pytest.fixture
def plugin(tmp_path: Path, plugin_log: Messages) -> Iterator[None]:
    """An installed distribution declaring ``veracity.methods`` entry points: a method, a
    module that does not exist, and an object that is not a method."""
    site = tmp_path / "site"
    (site / "length_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "length_method.py").write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    info = site / "length_plugin-0.1.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: length-plugin\nVersion: 0.1\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(
        "[veracity.methods]\nchar-length = length_method:METHOD\nbroken = no_such_module:METHOD\n"
        "wrong = length_method:section\n", encoding="utf-8")
    saved = dict(base._REGISTRY)
    sys.path.insert(0, str(site))
    base._loaded = False
    try:
        yield
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("length_method", None)
        base._REGISTRY.clear()
        base._REGISTRY.update(saved)
        base._loaded = False


def test_builtin_methods_are_registered_with_their_parts() -> None:
    assert method_names()[:6] == ("gamma", "attack", "isotropy", "deception", "fewl",
                                  "mitigation")  # folder by folder
    records = {name: get_method(name).record_type() for name in method_names()[:5]}
    assert records == {"gamma": GammaRecord, "deception": DeceptionRecord, "fewl": FewlRecord,
                       "attack": AttackStep, "isotropy": IsotropyRecord}
    gamma = get_method("gamma")
    assert isinstance(gamma, Method) and not gamma.higher_is_better
    assert [c.load().name for c in gamma.commands] == ["gamma", "calibrate", "validate", "annotate"]
    assert [(c.load().name, c.group) for c in get_method("mitigation").commands] == [
        ("icl", "fewl"), ("finetune", "fewl"), ("annotate", "fewl")]
    assert get_method("fewl").higher_is_better and "pairs.jsonl" in run_files()
    assert [s.title for s in get_method("deception").sections] == ["", "Comparison across models"]


def test_unknown_method_is_a_clear_error() -> None:
    from veracity.errors import UnknownSpecError

    with pytest.raises(UnknownSpecError, match="unknown method 'nope'; known: gamma"):
        get_method("nope")


def test_a_plugin_method_runs_reports_and_has_a_command(
    plugin: None, plugin_log: Messages, tmp_path: Path
) -> None:
    assert "char-length" in method_names() and "lengths.jsonl" in run_files()
    assert not {"broken", "wrong"} & set(method_names())  # skipped, said, the rest go on
    assert "method plugin broken (no_such_module:METHOD) not loaded: ModuleNotFoundError" in (
        plugin_log.text)
    assert "method plugin wrong (length_method:section) is not a veracity Method" in plugin_log.text
    from length_method import run_length  # type: ignore[import-not-found]

    result = run_length(["abc", "a"], tmp_path / "run")
    assert result.results["mean"] == 2.0 and result.records[1].to_json()["length"] == 1
    run = RunDir.open(tmp_path / "run")  # its run.json names a registered method
    assert run.method == "char-length" and "lengths.jsonl" in run.info["files"]
    html = build_report([run.path], tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<h2>Answer length</h2>" in html and "mean length 2.0" in html
    check_run_target(tmp_path / "run")  # a plugin's run may be replaced by a new one
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "lengths.jsonl").write_text("{}\n", encoding="utf-8")
    from veracity.errors import ConfigError

    with pytest.raises(ConfigError, match="lengths.jsonl but no run.json"):
        check_run_target(stray)
    (command_spec,) = get_method("char-length").commands
    command = command_spec.load()
    out = CliRunner().invoke(command, ["hello", "hi"])
    assert out.exit_code == 0 and "mean length 3.5" in out.output
