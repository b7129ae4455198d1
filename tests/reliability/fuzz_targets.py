"""Fuzz targets: every reader and parser of veracity, with a Hypothesis strategy for its input.

The property, for every target and every input: it returns a result or raises a
``VeracityError`` with a message, never any other exception. ``tests/reliability`` runs a few
hundred examples per target; ``bench/fuzz.py`` runs thousands.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from veracity.correctness import parse_verdict
from veracity.data.labelled import load_labelled, load_questions, read_pairs, read_texts
from veracity.data.mc import load_mc, read_recorded_file
from veracity.data.qa import load_items
from veracity.errors import VeracityError
from veracity.methods.deception.core import PREFILL_HEAD, parse_response
from veracity.methods.deception.dataset import parse_batch
from veracity.methods.fewl.pairs import parse_pairs
from veracity.methods.gamma.paraphrase import parse_paraphrase
from veracity.methods.gamma.recorded import read_recorded
from veracity.methods.gamma.validation.annotate import SheetRow, read_ratings
from veracity.report import build_report
from veracity.store import RunDir

# --- building blocks ------------------------------------------------------------------------

# any code point, lone surrogates included (JSON carries them as \ud800 escapes)
chars = st.characters(exclude_categories=())
texts = st.text(chars, max_size=40)
tricky = st.sampled_from([
    "", " ", "A", "-", "=1+1", "+cmd", "@SUM(A1)", "\x1b[31m", "\u202e", "\ud800", "NaN",
    "<script>alert(1)</script>", "\"", "'", "\\", "\n", "None", "0", "1e999", "{}", "[]",
    "What is 2+2?", "Shakespeare", "B", "a" * 300,
])
strings = st.one_of(texts, tricky)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), strings)
json_values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                     st.dictionaries(strings, inner, max_size=5)),
    max_leaves=12)


def fields(*names: str, **special: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """JSON objects that mostly carry the expected field names, with values of any type
    (``special`` adds a likelier shape for some fields)."""
    value = st.one_of(json_values, st.lists(strings, max_size=6), strings)
    optional = {n: st.one_of(value, special[n]) if n in special else value for n in names}
    return st.fixed_dictionaries({}, optional=optional).flatmap(
        lambda d: st.dictionaries(strings, json_values, max_size=2).map(lambda e: {**e, **d}))


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def huge_int(digits: int) -> str:
    return "1" * digits


def json_text(value: Any, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only, allow_nan=True)


oddities = st.sampled_from([
    deep(100_000), '{"question": ' + deep(5000) + "}", huge_int(5000),
    '{"question": ' + huge_int(5000) + "}", '{"question": NaN}', '{"question": 1e999}',
    '{"question": "\\ud800 x"}', '{"question": "ok"', "\ufeff", "\x00", "null", "[]", "[{}]",
])


def jsonl(*names: str, **special: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """JSONL files: records with the expected fields, oddities, and raw bytes."""
    line = st.one_of(
        st.builds(json_text, fields(*names, **special), st.booleans()),
        st.builds(json_text, json_values, st.booleans()),
        oddities,
    )
    text = st.lists(line, min_size=0, max_size=5).map("\n".join)
    return st.one_of(text.map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary(max_size=200))


def json_document(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    text = st.one_of(st.builds(json_text, shape, st.booleans()), oddities)
    return st.one_of(text.map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary(max_size=200))


def csv_bytes(header: list[str] | None, width: int) -> st.SearchStrategy[bytes]:
    """CSV files with the expected header (or none), rows of about ``width`` cells."""
    cell = st.one_of(strings, st.sampled_from(["A", "B", "C", "D", "-", "0", "3", "4"]))
    row = st.lists(cell, min_size=max(0, width - 2), max_size=width + 2)

    def render(rows: list[list[str]], with_header: bool) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        if header is not None and with_header:
            writer.writerow(header)
        writer.writerows(rows)
        return buffer.getvalue()

    text = st.builds(render, st.lists(row, max_size=5), st.booleans())
    raw = st.one_of(text, st.text(chars, max_size=200), st.sampled_from(['"unclosed, x', "a,b\n\0"]))
    return st.one_of(raw.map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary(max_size=200))


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


# --- targets -----------------------------------------------------------------------------

SHEET = [SheetRow("q1", "0123abcd", "qa", "What is 2+2?", "4"),
         SheetRow("-1", "89abcdef", "qa", "=cmd", "@x")]
QA_FIELDS = ("question", "id", "references", "answers", "answer", "reference", "best_answer")
MC_FIELDS = ("question", "options", "answer", "subject", "misleading_start", "id")


def _report(folder: Path, data: tuple[str, bytes, bytes]) -> Any:
    method, results, samples = data
    run = folder / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "method": method,
                                              "config": {}}), encoding="utf-8")
    (run / "results.json").write_bytes(results)
    (run / "samples.jsonl").write_bytes(samples)
    return build_report([run], folder / "report.html")


def _run_json(folder: Path, data: bytes) -> Any:
    (folder / "run.json").write_bytes(data)
    run = RunDir.open(folder)
    return run.info, run.method


@dataclass(frozen=True)
class Target:
    """One reader or parser: how to draw its input and how to call it."""

    strategy: st.SearchStrategy[Any]
    call: Callable[[Path, Any], Any]
    weight: float = 1.0
    """Share of the examples relative to the others (slow targets get fewer)."""


TARGETS: dict[str, Target] = {
    "dataset jsonl": Target(jsonl(*QA_FIELDS),
                            lambda d, b: load_items(f"jsonl:{_write(d, 'q.jsonl', b)}")),
    "dataset csv": Target(csv_bytes(["question", "id", "answer"], 3),
                          lambda d, b: load_items(f"csv:{_write(d, 'q.csv', b)}")),
    "dataset truthfulqa": Target(
        csv_bytes(["Type", "Category", "Question", "Best Answer", "Correct Answers",
                   "Incorrect Answers", "Source"], 7),
        lambda d, b: load_items(f"truthfulqa:{_write(d, 'tqa.csv', b)}")),
    "dataset webquestions": Target(
        json_document(st.lists(fields("qId", "qText", "answers"), max_size=4)),
        lambda d, b: load_items(f"webquestions:{_write(d, 'wq.json', b)}")),
    "recorded gamma": Target(
        jsonl("prompt", "answer", "perturbed_answers", "perturbed_prompts", "model", "ball", "id"),
        lambda d, b: read_recorded(_write(d, "rec.jsonl", b))),
    "dataset mc-jsonl": Target(jsonl(*MC_FIELDS),
                               lambda d, b: load_mc(f"mc-jsonl:{_write(d, 'mc.jsonl', b)}")),
    "dataset db-mmlu": Target(csv_bytes(None, 7),
                              lambda d, b: load_mc(f"db-mmlu:{_write(d, 'subj.csv', b).parent}")),
    "dataset mmlu": Target(
        csv_bytes(["question", "choice0", "choice1", "choice2", "choice3", "answer"], 6),
        lambda d, b: load_mc(f"mmlu:{_write(d, 'subj_test.csv', b)}")),
    "recorded deception": Target(csv_bytes(None, 5),
                                 lambda d, b: read_recorded_file(_write(d, "subj.csv", b))),
    "dataset chale": Target(
        json_document(fields("Question", "Short_ans", "halu", "mid-halu", "non-halu")),
        lambda d, b: load_labelled(f"chale:{_write(d, 'chale.json', b)}")),
    "dataset halueval": Target(
        jsonl("knowledge", "question", "right_answer", "hallucinated_answer"),
        lambda d, b: load_labelled(f"halueval:{_write(d, 'qa.jsonl', b)}")),
    "dataset haltt4llm": Target(
        json_document(st.lists(st.fixed_dictionaries(
            {"question": strings},
            optional={"answers": st.lists(fields("text", "correct", "choice",
                                                 correct=st.booleans(),
                                                 choice=st.sampled_from("ABCDE")), max_size=5)}),
            max_size=3)),
        lambda d, b: load_questions(f"haltt4llm:{_write(d, 'h.json', b)}")),
    "fewl answers file": Target(jsonl("id", "question", "answer", "answers"),
                                lambda d, b: read_texts(_write(d, "answers.jsonl", b))),
    "fewl pairs file": Target(
        jsonl("id", "question", "pairs", pairs=st.lists(fields("wrong", "corrected"), max_size=3)),
        lambda d, b: read_pairs(_write(d, "pairs.jsonl", b))),
    "rating sheet": Target(
        csv_bytes(["item_id", "answer_check", "kind", "question", "answer", "rating", "comment"], 7),
        lambda d, b: read_ratings(_write(d, "rater.csv", b), SHEET)),
    "deception answer parser": Target(
        st.tuples(st.one_of(st.builds(json_text, fields("Reasoning", "Answer"), st.booleans())
                            .map(lambda t: t[len(PREFILL_HEAD) - 1:] if len(t) > 20 else t),
                            st.text(chars, max_size=200), oddities),
                  st.booleans()),
        lambda d, x: parse_response(PREFILL_HEAD + "Let's", x[0], lenient=x[1])),
    "fewl pair parser": Target(
        st.lists(st.one_of(
            st.builds(lambda n, k, t: f"{n}. {k}: {t}", st.integers(-5, 999),
                      st.sampled_from(["Wrong", "Corrected", "**Wrong**", "Correct answer",
                                       "Question", "incorrect 3"]), strings),
            st.text(chars, max_size=60)), max_size=12).map("\n".join),
        lambda d, t: parse_pairs(t)),
    "make-dataset batch parser": Target(
        st.one_of(st.builds(json_text, st.lists(fields("id", "mistake", "misleading_start",
                                                       id=st.integers(-2, 5)), max_size=5),
                            st.booleans()).map(lambda t: f"```json\n{t}"),
                  st.text(chars, max_size=200), oddities),
        lambda d, t: parse_batch(t, 4)),
    "paraphrase and judge parsers": Target(
        st.text(chars, max_size=200),
        lambda d, t: (parse_paraphrase(t, "What is 2+2?"), parse_verdict(t))),
    "run.json": Target(json_document(fields("schema_version", "method", "config", "files")),
                       _run_json),
    "report of a hand-edited run": Target(
        st.tuples(st.sampled_from(["gamma", "deception", "fewl", "attack", "isotropy"]),
                  json_document(fields("aggregate", "settings", "model", "per_subject", "models",
                                       "steps", "validation", "dataset", "embedder")),
                  jsonl("prompt", "answer", "gamma", "id", "subject", "normal", "step")),
        _report, weight=0.1),
}


def outcome(target: Target, payload: Any) -> BaseException | None:
    """Run one example in a fresh folder: None when it returned or raised a VeracityError with
    a message, else the exception (a failure)."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            target.call(Path(folder), payload)
        except VeracityError as exc:
            if not str(exc).strip():
                return AssertionError(f"VeracityError without a message: {exc!r}")
        except Exception as exc:  # noqa: BLE001 - anything else is what the fuzzing looks for
            return exc
    return None
