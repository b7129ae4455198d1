"""Labelled question sets for validating and ranking label-free metrics, and JSONL answers.

- CHALE (dict of parallel lists): non-hallucinated answer vs half-hallucinated and vs
  hallucinated ones; gold = the NQ short answer.
- TruthfulQA CSV: the best answer vs the first incorrect one.
- HaluEval QA (JSONL): right answer vs hallucinated answer.
- haltt4llm TruthfulQA multiple choice (737): options A-E with exactly one correct.

A spec is ``kind:PATH`` with kind chale, truthfulqa, halueval or haltt4llm.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.data.jsonl import csv_reader, load_json_file, read_objects, stream_objects
from veracity.data.qa import load_items
from veracity.errors import DataError
from veracity.paths import user_path
from veracity.text import short
from veracity.types import Item

_TAG = re.compile(r"<\s*/?\s*[A-Za-z][A-Za-z0-9]*\s*/?\s*>")


@dataclass(frozen=True)
class LabelledItem:
    """A question with one better answer and one or more worse answers."""

    id: str
    question: str
    better: str
    worse: tuple[tuple[str, str], ...]
    """(name, text) of each worse answer, e.g. ("mid-halu", ...), ("halu", ...)."""
    gold: str
    """A gold answer (for the "ideal lambda" oracle only)."""
    better_name: str = "better"
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class MCQuestion:
    """A multiple-choice question: options (letter, text) and the correct letter."""

    id: str
    question: str
    options: tuple[tuple[str, str], ...]
    correct: str

    @property
    def correct_text(self) -> str:
        return dict(self.options)[self.correct]

    @property
    def labelled(self) -> bool:
        """False when the correct option's text is empty (nothing to match an answer to)."""
        return bool(self.correct_text)


def strip_html(text: str) -> str:
    """Drop HTML tags (CHALE keeps Natural Questions' ``<P>``) and squeeze spaces."""
    return re.sub(r"\s+", " ", _TAG.sub(" ", text)).strip()


def _text(value: Any, where: str, name: str) -> str:
    if value is not None and not isinstance(value, str):
        raise DataError(f"{where}, field '{name}': expected a string, got {type(value).__name__}")
    if not value or not value.strip():
        raise DataError(f"{where}: empty or missing '{name}'")
    return value.strip()


def _load_json(path: Path) -> Any:
    return load_json_file(path)


def load_chale(path: Path, clean_html: bool = True) -> list[LabelledItem]:
    """CHALE: a JSON dict of parallel lists Question, Short_ans, halu, mid-halu, non-halu."""
    data = _load_json(path)
    columns = ("Question", "Short_ans", "halu", "mid-halu", "non-halu")
    if not isinstance(data, dict) or any(c not in data for c in columns):
        raise DataError(f"{path}: not a CHALE file (need a dict with lists {list(columns)})")
    sizes = {c: len(data[c]) if isinstance(data[c], list) else -1 for c in columns}
    if len(set(sizes.values())) != 1 or -1 in sizes.values():
        raise DataError(f"{path}: CHALE columns must be lists of one length, got {sizes}")
    clean = strip_html if clean_html else str.strip
    items = []
    for row in range(sizes["Question"]):
        where = f"{path}, row {row}"
        values = {c: clean(_text(data[c][row], where, c)) for c in columns}
        items.append(LabelledItem(
            id=f"chale-{row:04d}", question=values["Question"], better=values["non-halu"],
            worse=(("mid-halu", values["mid-halu"]), ("halu", values["halu"])),
            gold=values["Short_ans"], better_name="non-halu",
        ))
    return items


def load_truthfulqa_pairs(path: Path) -> list[LabelledItem]:
    """TruthfulQA CSV: Best Answer vs the first of Incorrect Answers ("; "-separated)."""
    items: list[LabelledItem] = []
    reader = csv_reader(path)
    try:
        missing = [c for c in ("Question", "Best Answer", "Incorrect Answers")
                   if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path}: not a TruthfulQA CSV, missing columns {missing}")
        for row in reader:
            where = f"{path}, line {reader.line_num}"
            incorrect = [a.strip() for a in (row["Incorrect Answers"] or "").split("; ")]
            items.append(LabelledItem(
                id=f"tqa-{len(items):03d}",
                question=_text(row["Question"], where, "Question"),
                better=_text(row["Best Answer"], where, "Best Answer"),
                worse=(("first-incorrect", _text(incorrect[0], where, "Incorrect Answers")),),
                gold=row["Best Answer"].strip(), better_name="best",
                metadata={"category": row.get("Category", "")},
            ))
    except csv.Error as exc:
        raise DataError(f"{path}, line {reader.line_num}: malformed CSV ({exc})") from None
    return items


def _jsonl(path: Path, stream: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
    for number, record in (stream_objects if stream else read_objects)(path):
        yield f"{path}, line {number}", record


def load_halueval(path: Path) -> list[LabelledItem]:
    """HaluEval QA JSONL: knowledge, question, right_answer, hallucinated_answer."""
    items: list[LabelledItem] = []
    for where, record in _jsonl(path):
        right = _text(record.get("right_answer"), where, "right_answer")
        items.append(LabelledItem(
            id=f"halueval-{len(items):04d}",
            question=_text(record.get("question"), where, "question"),
            better=right,
            worse=(("hallucinated", _text(record.get("hallucinated_answer"), where,
                                          "hallucinated_answer")),),
            gold=right, better_name="right",
            metadata={"knowledge": record.get("knowledge", "")},
        ))
    return items


def load_haltt4llm(path: Path) -> list[MCQuestion]:
    """haltt4llm JSON list of {question, answers: [{text, correct, choice}]}, one correct.

    Options may be empty strings (record 284 upstream has an empty correct option); such a
    question is kept but ``labelled`` is False.
    """
    data = _load_json(path)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of questions")
    items = []
    for index, record in enumerate(data):
        where = f"{path}, record {index + 1}"
        if not isinstance(record, dict) or not isinstance(record.get("answers"), list):
            raise DataError(f"{where}: expected {{question, answers: [...]}}")
        options, correct = [], []
        for answer in record["answers"]:
            if not isinstance(answer, dict) or "choice" not in answer:
                raise DataError(f"{where}: every answer needs text, correct and choice")
            choice = answer["choice"]
            if not isinstance(choice, str) or not re.fullmatch(r"\s*[A-Za-z]\s*", choice):
                raise DataError(f"{where}, field 'choice': expected one letter, got "
                                f"{short(choice)}")
            letter = choice.strip().upper()
            if not isinstance(answer.get("text"), str):
                raise DataError(f"{where}: option {letter} has no text")
            # one upstream record has an empty correct option: kept, but unusable as a label
            options.append((letter, answer["text"].strip()))
            if answer.get("correct") is True:
                correct.append(letter)
        if len(correct) != 1:
            raise DataError(f"{where}: expected exactly one correct answer, found {len(correct)}")
        items.append(MCQuestion(f"haltt4llm-{index:03d}", _text(record.get("question"), where,
                                "question"), tuple(options), correct[0]))
    return items


LABELLED_KINDS = ("chale", "truthfulqa", "halueval")


def parse_spec(spec: str) -> tuple[str, Path]:
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise DataError(f"dataset spec '{spec}' must look like kind:PATH")
    return kind, user_path(rest)


def load_labelled(spec: str, limit: int | None = None) -> list[LabelledItem]:
    """``chale:PATH``, ``truthfulqa:PATH`` or ``halueval:PATH``; the first ``limit`` items."""
    kind, path = parse_spec(spec)
    loaders = {"chale": load_chale, "truthfulqa": load_truthfulqa_pairs, "halueval": load_halueval}
    if kind not in loaders:
        raise DataError(f"no labelled loader for '{kind}'; known: {', '.join(LABELLED_KINDS)}")
    items = loaders[kind](path)
    if not items:
        raise DataError(f"dataset '{spec}' has no questions")
    return items[:limit] if limit is not None else items


def load_questions(spec: str, limit: int | None = None) -> list[Item]:
    """Any question dataset: haltt4llm / chale / halueval (labelled loaders) or the general
    loaders (builtin, truthfulqa, webquestions, jsonl, csv). haltt4llm items carry their
    options and correct letter in metadata, which rank uses as labels."""
    kind = spec.partition(":")[0]
    if kind == "haltt4llm":
        mc = load_haltt4llm(parse_spec(spec)[1])[:limit]
        return [Item(m.id, m.question, (m.correct_text,),
                     {"options": [list(o) for o in m.options], "correct": m.correct}
                     if m.labelled else {"unlabelled": "empty correct option"}) for m in mc]
    if kind in ("chale", "halueval"):
        return [Item(x.id, x.question, (x.gold,)) for x in load_labelled(spec, limit)]
    return load_items(spec, limit)


# --- answers, references and pairs as JSONL ------------------------------------------------


def _key(record: dict[str, Any], where: str) -> str:
    for name in ("id", "question"):
        value = record.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    raise DataError(f"{where}: needs an 'id' (or 'question') to match it to a question")


def _strings(value: Any, where: str, name: str) -> list[str]:
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in values):
        raise DataError(f"{where}: '{name}' must be a string or a list of strings")
    return [str(v) for v in values]


def text_rows(path: Path, fields: Sequence[str] = ("answer", "answers"),
              stream: bool = False) -> Iterator[tuple[str, list[str]]]:
    """(id or question, texts) per line, from the first of ``fields`` present on it;
    ``stream`` reads one line at a time."""
    for where, record in _jsonl(path, stream):
        name = next((f for f in fields if f in record), None)
        if name is None:
            raise DataError(f"{where}: no field {' or '.join(repr(f) for f in fields)}")
        yield _key(record, where), _strings(record[name], where, name)


def read_texts(path: Path, fields: Sequence[str] = ("answer", "answers")) -> dict[str, list[str]]:
    """id (or question) -> texts, from the first of ``fields`` present on each line.

    Reads files this module writes and the ``samples.jsonl`` of FEWL runs; repeated ids
    append, so candidates may also come one per line.
    """
    out: dict[str, list[str]] = {}
    for key, texts in text_rows(path, fields):
        out.setdefault(key, []).extend(texts)
    if not out:
        raise DataError(f"{path}: no records")
    return out


def pair_rows(path: Path, stream: bool = False) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """(id or question, [(wrong, corrected)]) per ``pairs: [{wrong, corrected}]`` line."""
    for where, record in _jsonl(path, stream):
        pairs = record.get("pairs")
        if not isinstance(pairs, list):
            raise DataError(f"{where}: 'pairs' must be a list of {{wrong, corrected}}")
        parsed = []
        for pair in pairs:
            if not isinstance(pair, dict) or not all(
                isinstance(pair.get(k), str) for k in ("wrong", "corrected")
            ):
                raise DataError(f"{where}: each pair needs string 'wrong' and 'corrected'")
            parsed.append((pair["wrong"], pair["corrected"]))
        yield _key(record, where), parsed


def read_pairs(path: Path) -> dict[str, list[tuple[str, str]]]:
    """id (or question) -> [(wrong, corrected)] from ``pairs: [{wrong, corrected}]`` lines."""
    out: dict[str, list[tuple[str, str]]] = {}
    for key, parsed in pair_rows(path):
        out.setdefault(key, []).extend(parsed)
    if not out:
        raise DataError(f"{path}: no records")
    return out


_LEADING_LETTER = re.compile(
    r"^\s*(?:(?:the\s+)?answer(?:\s+is)?\s*[:\-]?\s*)?[(\[]?(?P<letter>[A-Z])"
    r"(?:[)\]:]|\.(?:\s|$)|\s*$|\s+-\s)",
    re.IGNORECASE,
)


def leading_letter(answer: str, letters: Sequence[str]) -> str | None:
    """The option letter an answer starts with ("B", "(B)", "B) ...", "Answer: B"), if any.

    The letter itself must be upper case, so the article "a" never counts as option A.
    """
    match = _LEADING_LETTER.match(answer)
    if match is None or not match.group("letter").isupper():
        return None
    letter = match.group("letter")
    return letter if letter in letters else None
