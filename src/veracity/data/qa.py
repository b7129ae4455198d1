"""Free-form question loaders: built-in set, TruthfulQA CSV, WebQuestions JSON, Programming QA
JSONL, any JSONL/CSV.

A dataset spec is ``kind:PATH`` (``truthfulqa:``, ``webquestions:``, ``progqa:``, ``jsonl:``,
``csv:``), ``builtin``, or a bare path whose kind is guessed from its extension and header.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

from veracity.data.jsonl import csv_reader, line_objects, load_json_file, read_objects, text_lines
from veracity.errors import DataError
from veracity.paths import user_path
from veracity.types import Item

_KINDS = ("builtin", "truthfulqa", "webquestions", "progqa", "jsonl", "csv")
PROGRAMMING = "programming"
"""The ``domain`` of Programming QA items: the coding rubric applies to them."""


def _split_list(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(";") if part.strip())


def _question(value: Any, where: str) -> str:
    if value is not None and not isinstance(value, str):
        raise DataError(f"{where}: the question must be a string, got {type(value).__name__}")
    if not value or not value.strip():
        raise DataError(f"{where}: empty or missing question")
    return value.strip()


def _references(record: dict[str, Any], where: str) -> tuple[str, ...]:
    """The first reference field present: a string or a list of strings."""
    for name in ("references", "answers", "answer", "reference", "best_answer"):
        value = record.get(name)
        if value is None or value == "":
            continue
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise DataError(f"{where}, field '{name}': expected a string or a list of strings, "
                            f"got {type(value).__name__}")
        return tuple(v.strip() for v in values if v.strip())
    return ()


def _id(value: Any, default: str, where: str) -> str:
    """An item id: a string or an integer (default when absent)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        raise DataError(f"{where}, field 'id': expected a non-empty string or an integer")
    return str(value).strip()


def _csv_records(path: Path, reader: csv.DictReader[str] | None = None,
                 ) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv_reader(path) if reader is None else reader
    try:
        if not reader.fieldnames:
            raise DataError(f"{path}: empty CSV file (no header)")
        for row in reader:
            if None in row:
                raise DataError(f"{path}, line {reader.line_num}: more cells than header columns")
            yield reader.line_num, {k: v or "" for k, v in row.items()}  # short rows: "" cells
    except csv.Error as exc:
        raise DataError(f"{path}, line {reader.line_num}: malformed CSV ({exc})") from None


def load_builtin(path: Path | None = None, question_field: str = "question") -> list[Item]:
    """Our own 42 short factual questions with reference answers (``question_field`` can only
    be ``question``; anything else is a DataError, not silently ignored)."""
    source = files("veracity.data") / "builtin_questions.jsonl"
    items = []
    for line in source.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if question_field not in record or question_field in ("id", "references"):
            raise DataError(f"the built-in questions have no '{question_field}' field (only 'question')")
        items.append(Item(record["id"], record[question_field], tuple(record["references"])))
    return items


def load_truthfulqa(path: Path, question_field: str = "Question") -> list[Item]:
    """TruthfulQA CSV (Type, Category, Question, Best Answer, Correct/Incorrect Answers, Source);
    the question is read from the ``question_field`` column."""
    items: list[Item] = []
    for number, row in _csv_records(path):
        missing = [c for c in ("Best Answer", "Correct Answers") if c not in row]
        if missing:
            raise DataError(f"{path}: not a TruthfulQA CSV, missing columns {missing}")
        if question_field not in row:
            raise DataError(f"{path}: no '{question_field}' column (use --question-field)")
        question = _question(row[question_field], f"{path}, line {number}")
        best = row["Best Answer"].strip()
        correct = _split_list(row.get("Correct Answers", ""))
        items.append(
            Item(
                id=f"tqa-{len(items):03d}",
                question=question,
                references=(best, *[c for c in correct if c != best]),
                metadata={
                    "category": row.get("Category", ""),
                    "best_answer": best,
                    "correct_answers": list(correct),
                    "incorrect_answers": list(_split_list(row.get("Incorrect Answers", ""))),
                },
            )
        )
    return items


def load_webquestions(path: Path, question_field: str = "qText") -> list[Item]:
    """WebQuestions JSON list of {qId, qText, answers}."""
    records = load_json_file(path)
    if not isinstance(records, list):
        raise DataError(f"{path}: expected a JSON list of questions")
    items = []
    for index, record in enumerate(records):
        where = f"{path}, record {index + 1}"
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected an object")
        answers = record.get("answers", [])
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise DataError(f"{where}, field 'answers': expected a list of strings, "
                            f"got {type(answers).__name__}")
        items.append(
            Item(
                id=_id(record.get("qId"), f"wq-{index:05d}", where),
                question=_question(record.get(question_field), f"{where}, field '{question_field}'"),
                references=tuple(a.strip() for a in answers if a.strip()),
            )
        )
    return items


def load_progqa(path: Path, question_field: str = "prompt") -> list[Item]:
    """Programming QA, the paper's third corpus: the JSONL dump the authors'
    ``process_program_q.py`` reads, one ``{"prompt": ..., "response": ...}`` per line. Items are
    numbered from 1 in file order as there (``progqa-1``, ...); the response is the reference
    answer, and every item is marked ``domain: programming`` so the coding rubric applies."""
    items: list[Item] = []
    for number, record in read_objects(path):
        where = f"{path}, line {number}"
        if question_field not in record:
            raise DataError(f"{where}: no '{question_field}' field (a Programming QA line holds "
                            "'prompt' and 'response')")
        response = record.get("response", "")
        if not isinstance(response, str):
            raise DataError(f"{where}, field 'response': expected a string, got "
                            f"{type(response).__name__}")
        items.append(Item(
            id=f"progqa-{len(items) + 1}",
            question=_question(record[question_field], f"{where}, field '{question_field}'"),
            references=(response.strip(),) if response.strip() else (),
            metadata={"domain": PROGRAMMING, "line": number},
        ))
    return items


def _jsonl_items(path: Path, records: Iterable[tuple[int, dict[str, Any]]],
                 question_field: str) -> Iterator[Item]:
    for number, record in records:
        where = f"{path}, line {number}"
        if question_field not in record:
            raise DataError(f"{where}: no '{question_field}' field (use --question-field)")
        yield Item(
            id=_id(record.get("id"), f"line-{number}", where),
            question=_question(record[question_field], f"{where}, field '{question_field}'"),
            references=_references(record, where),
            metadata={k: v for k, v in record.items() if k not in (question_field, "id")},
        )


def _csv_items(path: Path, rows: Iterable[tuple[int, dict[str, str]]],
               question_field: str) -> Iterator[Item]:
    for number, row in rows:
        where = f"{path}, line {number}"
        if question_field not in row:
            raise DataError(f"{path}: no '{question_field}' column (use --question-field)")
        yield Item(
            id=str(row.get("id") or f"line-{number}"),
            question=_question(row[question_field], f"{where}, column '{question_field}'"),
            references=_references(dict(row), where),
        )


def load_jsonl(path: Path, question_field: str = "question") -> list[Item]:
    """Any JSONL file with a question field; ``id`` and ``references``/``answer`` are optional."""
    return list(_jsonl_items(path, read_objects(path), question_field))


def load_csv(path: Path, question_field: str = "question") -> list[Item]:
    """Any CSV file with a header naming the question column."""
    return list(_csv_items(path, _csv_records(path), question_field))


def stream_jsonl(path: Path, question_field: str = "question") -> Iterator[Item]:
    """:func:`load_jsonl` one line at a time: the same items and errors, never the whole file."""
    return _jsonl_items(path, line_objects(path), question_field)


def stream_csv(path: Path, question_field: str = "question") -> Iterator[Item]:
    """:func:`load_csv` one row at a time: the same items and errors, never the whole file."""
    rows = _csv_records(path, csv.DictReader(text_lines(path), strict=True))
    return _csv_items(path, rows, question_field)


LOADERS: dict[str, Callable[..., list[Item]]] = {
    "builtin": load_builtin,
    "truthfulqa": load_truthfulqa,
    "webquestions": load_webquestions,
    "progqa": load_progqa,
    "jsonl": load_jsonl,
    "csv": load_csv,
}


DOMAINS = {"builtin": "built-in questions", "truthfulqa": "TruthfulQA", "webquestions": "Web QA",
           "progqa": "Programming QA"}
"""The paper's names of the corpora (Table 8's columns)."""


def domain_of(spec: str) -> str:
    """A dataset spec's domain: the paper's corpus name for its kind, else the file's stem.

    >>> domain_of("webquestions:data/wq.json"), domain_of("jsonl:my/medical.jsonl")
    ('Web QA', 'medical')
    """
    kind, sep, rest = spec.partition(":")
    if spec == "builtin" or kind == "builtin":
        return DOMAINS["builtin"]
    if sep and kind in DOMAINS:
        return DOMAINS[kind]
    path = Path(rest if sep and kind in LOADERS else spec)
    if path.suffix == ".json":
        return DOMAINS["webquestions"]
    return path.stem or spec


def _guess_kind(path: Path) -> str:
    if path.suffix == ".jsonl":
        return "jsonl"
    if path.suffix == ".json":
        return "webquestions"
    if path.suffix == ".csv":
        header = next(text_lines(path), "").rstrip("\n")  # the first line, not the whole file
        return "truthfulqa" if "Best Answer" in header else "csv"
    raise DataError(f"cannot tell the format of {path}; use one of {', '.join(_KINDS)} as kind:PATH")


def dataset_source(spec: str) -> tuple[str, Path]:
    """The loader kind and file of a dataset spec (``builtin``: an empty path)."""
    kind, sep, rest = spec.partition(":")
    if spec == "builtin" or kind == "builtin":
        return "builtin", Path()
    if sep and kind in LOADERS:
        return kind, user_path(rest)
    path = user_path(spec)
    return _guess_kind(path), path


STREAMED: dict[str, Callable[..., Iterator[Item]]] = {"jsonl": stream_jsonl, "csv": stream_csv}
"""The loaders that can read a file one record at a time (the formats that get large)."""


def load_items(spec: str, limit: int | None = None, question_field: str | None = None) -> list[Item]:
    """Load a dataset spec into items, keeping the first ``limit``."""
    kind, path = dataset_source(spec)
    loader = LOADERS[kind]
    items = loader(path, question_field) if question_field else loader(path)
    if not items:
        raise DataError(f"dataset '{spec}' has no questions")
    return items[:limit] if limit is not None else items
