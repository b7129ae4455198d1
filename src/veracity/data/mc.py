"""Multiple-choice loaders (DB-MMLU, MMLU, MC-JSONL) and the recorded-results reader.

Dataset specs: ``db-mmlu:DIR`` (one headerless 7-column CSV per subject: question,
misleading_start, A, B, C, D, answer), ``mmlu:DIR_OR_FILE`` (header question,choice0..3,answer
with an integer answer; no misleading openings) and ``mc-jsonl:FILE`` (question, options,
answer, optional subject / misleading_start / id). Item ids are ``<subject>/<row>`` with the
1-based row of the source file, so results can be traced back to the data. An MMLU directory
with split folders (``dev/``, ``test/``, ``val/``) merges the splits per subject, as DB-MMLU
did; ids then name the split too: ``<subject>/<split>/<row>``.
"""

from __future__ import annotations

import csv
import gzip
import io
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from veracity.data.jsonl import line_objects, read_objects
from veracity.errors import DataError
from veracity.paths import user_path
from veracity.space import replace_text, writing
from veracity.text import csv_cell, csv_uncell, short
from veracity.types import MCItem

LETTERS = ("A", "B", "C", "D")
NO_ANSWER = "-"
KINDS = ("db-mmlu", "mmlu", "mc-jsonl")
_SPLIT_SUFFIXES = ("_test", "_dev", "_val", "_validation")
MMLU_SPLITS = ("dev", "test", "val", "validation")
"""Split folders an MMLU directory may hold, merged in this order."""


def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(1-based row, cells) of a headerless or headed CSV file, plain or gzipped."""
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    try:
        raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        text = raw.decode("utf-8-sig")
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
        raise DataError(f"{path}: cannot read ({exc})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)  # unclosed quotes fail
    row = 0
    try:
        for cells in reader:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            row += 1
            yield row, cells
    except csv.Error as exc:
        raise DataError(f"{path}, row {row + 1}: malformed CSV ({exc})") from None


def _letter(value: str, where: str) -> str:
    letter = value.strip()
    if letter not in LETTERS:
        raise DataError(f"{where}: answer must be one of A, B, C, D, got {short(value)}")
    return letter


def _text(value: Any, what: str, where: str) -> str:
    if value is not None and not isinstance(value, str):
        raise DataError(f"{where}: {what} must be a string, got {type(value).__name__}")
    if not value or not value.strip():
        raise DataError(f"{where}: empty or missing {what}")
    return value.strip()


def _options_of(cells: Sequence[Any], where: str) -> tuple[str, ...]:
    return tuple(_text(c, f"option {letter}", where) for letter, c in zip(LETTERS, cells,
                                                                            strict=True))


def subject_files(directory: Path, suffixes: Sequence[str] = (".csv",)) -> dict[str, Path]:
    """Subject name -> file for every ``<subject><suffix>`` in a directory."""
    if not directory.is_dir():
        raise DataError(f"dataset directory not found: {directory}")
    found: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        for suffix in suffixes:
            if path.is_file() and path.name.endswith(suffix):
                found.setdefault(path.name[: -len(suffix)], path)
    return found


def _pick(available: dict[str, Path], subjects: Sequence[str] | None, where: Path) -> list[str]:
    if not available:
        raise DataError(f"{where}: no subject files found")
    if subjects is None:
        return sorted(available)
    missing = [s for s in subjects if s not in available]
    if missing:
        raise DataError(
            f"{where}: no file for subject(s) {', '.join(missing)} "
            f"(known: {', '.join(sorted(available)[:8])}{', ...' if len(available) > 8 else ''})"
        )
    return list(dict.fromkeys(subjects))


def read_db_mmlu_file(path: Path, subject: str) -> list[MCItem]:
    """One DB-MMLU subject file: no header, 7 columns."""
    items = []
    for row, cells in _csv_rows(path):
        where = f"{path}, row {row}"
        if len(cells) != 7:
            raise DataError(f"{where}: expected 7 columns (question, misleading_start, A, B, C, D, "
                            f"answer), found {len(cells)}")
        question, start, a, b, c, d, answer = (csv_uncell(cell) for cell in cells)
        items.append(MCItem(
            id=f"{subject}/{row}",
            subject=subject,
            question=_text(question, "question", where),
            options=_options_of((a, b, c, d), where),
            answer=_letter(answer, where),
            misleading_start=_text(start, "misleading_start", where),
        ))
    return items


def load_db_mmlu(
    directory: Path, subjects: Sequence[str] | None = None, limit_per_subject: int | None = None
) -> list[MCItem]:
    """All (or the named) subjects of a DB-MMLU directory, in subject order."""
    available = subject_files(directory)
    items: list[MCItem] = []
    for subject in _pick(available, subjects, directory):
        items.extend(read_db_mmlu_file(available[subject], subject)[:limit_per_subject])
    return items


def _mmlu_subject(path: Path) -> str:
    stem = path.name.removesuffix(".csv")
    for suffix in _SPLIT_SUFFIXES:
        if stem.endswith(suffix):
            return stem[: -len(suffix)]
    return stem


def _mmlu_split(path: Path) -> str:
    stem = path.name.removesuffix(".csv")
    return next((s[1:] for s in _SPLIT_SUFFIXES if stem.endswith(s)), path.parent.name)


def read_mmlu_file(path: Path, subject: str | None = None) -> list[MCItem]:
    """One MMLU CSV with header ``question,choice0,choice1,choice2,choice3,answer`` (answer 0-3)."""
    subject = subject or _mmlu_subject(path)
    items = []
    rows = _csv_rows(path)
    header = next(rows, None)
    expected = ["question", "choice0", "choice1", "choice2", "choice3", "answer"]
    if header is None or [h.strip() for h in header[1]] != expected:
        raise DataError(f"{path}, row 1: expected the header {','.join(expected)}")
    for row, cells in rows:
        where = f"{path}, row {row}"
        if len(cells) != 6:
            raise DataError(f"{where}: expected 6 columns, found {len(cells)}")
        answer = cells[5].strip()
        if answer not in ("0", "1", "2", "3"):
            raise DataError(f"{where}: answer must be an integer 0-3, got {short(cells[5])}")
        items.append(MCItem(
            id=f"{subject}/{row}",
            subject=subject,
            question=_text(cells[0], "question", where),
            options=_options_of(cells[1:5], where),
            answer=LETTERS[int(answer)],
        ))
    return items


def mmlu_files(path: Path) -> dict[str, list[Path]]:
    """Subject -> its MMLU files: the file itself, the CSVs of a directory, and those of its
    split folders (dev, test, val), splits in that order."""
    if path.is_file():
        return {_mmlu_subject(path): [path]}
    if not path.is_dir():
        raise DataError(f"dataset directory not found: {path}")
    folders = [path] + [path / s for s in MMLU_SPLITS if (path / s).is_dir()]
    files: dict[str, list[Path]] = {}
    for folder in folders:
        for p in sorted(folder.iterdir()):
            if p.is_file() and p.name.endswith(".csv"):
                files.setdefault(_mmlu_subject(p), []).append(p)
    return files


def load_mmlu(
    path: Path, subjects: Sequence[str] | None = None, limit_per_subject: int | None = None
) -> list[MCItem]:
    """An MMLU split directory (``<subject>_test.csv`` ...), a single MMLU CSV file, or a
    directory of split folders, whose splits are merged per subject (ids name the split)."""
    files = mmlu_files(path)
    items: list[MCItem] = []
    for subject in _pick({s: f[0] for s, f in files.items()}, subjects, path):
        merged: list[MCItem] = []
        several = len(files[subject]) > 1
        for file in files[subject]:
            read = read_mmlu_file(file, subject)
            if several:  # rows repeat across splits: the id names the split
                split = _mmlu_split(file)
                read = [replace(i, id=f"{subject}/{split}/{i.id.rsplit('/', 1)[1]}") for i in read]
            merged.extend(read)
        items.extend(merged[:limit_per_subject])
    return items


def _options(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, dict):
        keys = sorted(value)
        if keys != list(LETTERS):
            raise DataError(f"{where}, field 'options': an object must have the keys A, B, C, D")
        value = [value[k] for k in LETTERS]
    if not isinstance(value, list) or len(value) != 4:
        raise DataError(f"{where}, field 'options': expected a list of 4 strings (or an A-D "
                        "object)")
    return _options_of(value, f"{where}, field 'options'")


def _optional_text(record: dict[str, Any], name: str, where: str) -> str:
    """An optional string field ("" when absent); an id may also be an integer."""
    value = record.get(name)
    if value is None:
        return ""
    if name == "id" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise DataError(f"{where}, field '{name}': expected a string, got {type(value).__name__}")
    return value.strip()


def _jsonl_answer(value: Any, where: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 4:
        return LETTERS[value]
    if isinstance(value, str):
        return _letter(value, where)
    raise DataError(f"{where}: 'answer' must be a letter A-D or an index 0-3, got {short(value)}")


def load_mc_jsonl(
    path: Path, subjects: Sequence[str] | None = None, limit_per_subject: int | None = None
) -> list[MCItem]:
    """JSONL: question, options (4), answer (A-D or 0-3); optional subject, misleading_start, id."""
    return list(_mc_jsonl_items(path, read_objects(path), subjects, limit_per_subject))


def stream_mc_jsonl(
    path: Path, subjects: Sequence[str] | None = None, limit_per_subject: int | None = None
) -> Iterator[MCItem]:
    """:func:`load_mc_jsonl` one line at a time: the same items and errors."""
    return _mc_jsonl_items(path, line_objects(path), subjects, limit_per_subject)


def _mc_jsonl_items(
    path: Path, records: Iterable[tuple[int, dict[str, Any]]], subjects: Sequence[str] | None,
    limit_per_subject: int | None,
) -> Iterator[MCItem]:
    counts: dict[str, int] = {}
    for number, record in records:
        where = f"{path}, line {number}"
        for name in ("question", "options", "answer"):
            if name not in record:
                raise DataError(f"{where}: missing field '{name}'")
        subject = _optional_text(record, "subject", where) or path.stem
        if subjects is not None and subject not in subjects:
            continue
        counts[subject] = counts.get(subject, 0) + 1
        if limit_per_subject is not None and counts[subject] > limit_per_subject:
            continue
        yield MCItem(
            id=_optional_text(record, "id", where) or f"{subject}/{number}",
            subject=subject,
            question=_text(record["question"], "question", f"{where}, field 'question'"),
            options=_options(record["options"], where),
            answer=_jsonl_answer(record["answer"], f"{where}, field 'answer'"),
            misleading_start=_optional_text(record, "misleading_start", where),
        )
    if subjects is not None:
        missing = [s for s in subjects if s not in counts]
        if missing:
            raise DataError(f"{path}: no items for subject(s) {', '.join(missing)}")


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed ``kind:PATH`` dataset spec."""

    kind: str
    path: Path

    def __str__(self) -> str:
        return f"{self.kind}:{self.path}"


def parse_dataset_spec(spec: str) -> DatasetSpec:
    """``db-mmlu:DIR``, ``mmlu:DIR_OR_FILE`` or ``mc-jsonl:FILE``."""
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in KINDS or not rest:
        raise DataError(
            f"dataset spec '{spec}' must be one of db-mmlu:DIR, mmlu:DIR_OR_FILE, mc-jsonl:FILE"
        )
    return DatasetSpec(kind, user_path(rest))


def load_mc(
    spec: str | DatasetSpec,
    subjects: Sequence[str] | None = None,
    limit_per_subject: int | None = None,
) -> list[MCItem]:
    """Load a multiple-choice dataset spec; raises DataError when nothing is left."""
    parsed = spec if isinstance(spec, DatasetSpec) else parse_dataset_spec(spec)
    loader = {"db-mmlu": load_db_mmlu, "mmlu": load_mmlu, "mc-jsonl": load_mc_jsonl}[parsed.kind]
    if limit_per_subject is not None and limit_per_subject < 1:
        raise DataError("limit per subject must be at least 1")
    items = loader(parsed.path, subjects, limit_per_subject)
    if not items:
        raise DataError(f"dataset '{parsed}' has no items")
    return items


@dataclass(frozen=True)
class RecordedRow:
    """One row of a recorded-results file (the DB-MMLU authors' format)."""

    row: int
    gold: str
    normal_reasoning: str
    normal_answer: str
    misleading_reasoning: str
    misleading_answer: str


def _prediction(value: str, where: str, column: int) -> str:
    letter = value.strip()
    if letter not in (*LETTERS, NO_ANSWER):
        raise DataError(f"{where}, column {column}: prediction must be A-D or '-', got "
                        f"{short(value)}")
    return letter


def read_recorded_file(path: Path) -> list[RecordedRow]:
    """``<subject>.csv[.gz]``: no header; gold, normal reasoning, normal prediction,
    misleading reasoning, misleading prediction."""
    rows = []
    for row, cells in _csv_rows(path):
        where = f"{path}, row {row}"
        if len(cells) != 5:
            raise DataError(f"{where}: expected 5 columns (gold, normal reasoning, normal "
                            f"prediction, misleading reasoning, misleading prediction), "
                            f"found {len(cells)}")
        rows.append(RecordedRow(
            row=row,
            gold=_letter(cells[0], f"{where}, column 1 (gold)"),
            normal_reasoning=cells[1],
            normal_answer=_prediction(cells[2], where, 3),
            misleading_reasoning=cells[3],
            misleading_answer=_prediction(cells[4], where, 5),
        ))
    return rows


def recorded_files(directory: Path) -> dict[str, Path]:
    """Subject -> recorded file (``<subject>.csv`` or ``<subject>.csv.gz``)."""
    if not directory.is_dir():
        raise DataError(f"results directory not found: {directory}")
    files = subject_files(directory, (".csv.gz", ".csv"))
    if not files:
        raise DataError(f"{directory}: no <subject>.csv or <subject>.csv.gz files")
    return files


def match_recorded(
    items: Sequence[MCItem], rows: Sequence[RecordedRow], results_file: Path, dataset_file: Path
) -> None:
    """Check row i of the results matches row i of the dataset (gold letter, then count);
    a shifted or missing row is reported at the first row where the files part."""
    for item, row in zip(items, rows, strict=False):
        if row.gold != item.answer:
            raise DataError(
                f"{results_file}, row {row.row}: gold letter {row.gold} does not match "
                f"{dataset_file}, row {row.row} (answer {item.answer})"
            )
    if len(rows) < len(items):
        raise DataError(
            f"{results_file} has {len(rows)} rows but {dataset_file} has {len(items)}: "
            f"no result for dataset row {len(rows) + 1} onwards"
        )
    if len(rows) > len(items):
        raise DataError(
            f"{results_file}, row {rows[len(items)].row}: no such row in {dataset_file} "
            f"({len(items)} rows)"
        )


def write_db_mmlu_file(path: Path, items: Sequence[MCItem]) -> None:
    """Write items in the DB-MMLU format (no header, 7 columns), so ``db-mmlu:`` reads them;
    cells a spreadsheet would run as formulas get a ``'`` that the reader removes again."""
    for item in items:
        if len(item.options) != 4 or not item.misleading_start:
            raise DataError(f"item {item.id}: needs 4 options and a misleading opening")
    with writing(path.parent, "a dataset's folder"):
        path.parent.mkdir(parents=True, exist_ok=True)
    rows = io.StringIO()
    writer = csv.writer(rows)
    for item in items:
        writer.writerow([csv_cell(cell) for cell in (item.question, item.misleading_start,
                                                     *item.options, item.answer)])
    replace_text(path, rows.getvalue(), "a DB-MMLU file")  # a temporary name per process
