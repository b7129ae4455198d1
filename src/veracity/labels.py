"""Label sources for the benchmark: which answers are right, by several rules at once.

``--labels`` takes any of:

- ``contains``: the answer contains a correct reference as whole words, case-insensitive
  (:func:`veracity.correctness.contains_gold`).
- ``exact``: the answer equals a correct reference after SQuAD's normalisation (lower case,
  punctuation, articles and extra spaces removed; Rajpurkar et al. 2016).
- ``rouge-l``: the answer's best ROUGE-L F-measure (Lin 2004, Google's ``rouge-score``)
  against the correct references is at least 0.3, the cut Kuhn et al. (2023) use.
- ``similarity``: TruthfulQA's embedding rule (:func:`veracity.correctness.similarity_verdicts`):
  closer to a correct reference than to every incorrect one; items need both.
- ``judge:SPEC``: a judge model asked CORRECT / INCORRECT (greedy, cached).
- ``sheet:FILE``: labels a person wrote: a CSV with columns ``id`` and ``correct`` (1/0,
  true/false, yes/no; empty = unlabelled), or a JSONL file with those keys.

An empty answer is wrong under every source; an item a source cannot decide (no reference
answers, an unparseable judge reply, no row in the sheet) is unlabelled (None) for it.
"""

from __future__ import annotations

import csv
import json
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from veracity.correctness import Labelled, contains_gold, judge_verdicts, similarity_verdicts
from veracity.errors import ConfigError, DataError
from veracity.runs.common import Context

ROUGE_L_CUT = 0.3
SIMPLE = ("contains", "exact", "rouge-l", "similarity")


@dataclass(frozen=True)
class LabelSource:
    """One ``--labels`` value: a rule name and, for ``judge`` and ``sheet``, its argument."""

    kind: str
    argument: str = ""

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.argument}" if self.argument else self.kind

    @staticmethod
    def parse(text: str) -> LabelSource:
        kind, _, argument = text.strip().partition(":")
        if kind in SIMPLE and not argument:
            return LabelSource(kind)
        if kind in ("judge", "sheet") and argument:
            return LabelSource(kind, argument)
        raise ConfigError(f"--labels {text!r}: use one of {', '.join(SIMPLE)}, judge:MODEL or "
                          "sheet:FILE")


def normalise_squad(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no a/an/the, single spaces."""
    lowered = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", lowered).split())


def rouge_l(answer: str, references: Sequence[str]) -> float:
    """The best ROUGE-L F-measure of the answer against the references (0 without any)."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"])
    return max((scorer.score(ref, answer)["rougeL"].fmeasure for ref in references if ref.strip()),
               default=0.0)


def _yes_no(value: object, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in ("", "none", "null", "?"):
        return None
    if word in ("1", "true", "yes", "y", "correct"):
        return True
    if word in ("0", "false", "no", "n", "incorrect", "wrong"):
        return False
    raise DataError(f"{where}: 'correct' must be 1/0, true/false or yes/no, got {value!r}")


def read_sheet(path: Path) -> dict[str, bool | None]:
    """Labels by item id from a CSV (columns id, correct) or JSONL sheet."""
    if not path.is_file():
        raise DataError(f"label sheet {path} not found")
    out: dict[str, bool | None] = {}
    if path.suffix.lower() in (".jsonl", ".json"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}, line {number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict) or "id" not in row or "correct" not in row:
                raise DataError(f"{path}, line {number}: needs the keys 'id' and 'correct'")
            out[str(row["id"])] = _yes_no(row["correct"], f"{path}, line {number}")
        return out
    with path.open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or not {"id", "correct"} <= set(reader.fieldnames):
            raise DataError(f"{path}: a label sheet needs the columns 'id' and 'correct'")
        for number, row in enumerate(reader, 2):
            out[row["id"]] = _yes_no(row["correct"], f"{path}, line {number}")
    return out


def label_items(source: LabelSource, ids: Sequence[str], items: Sequence[Labelled],
                ctx: Context, embedder: str) -> list[bool | None]:
    """One label per item from one source (None = this source cannot decide it)."""
    out: list[bool | None] = [None] * len(items)
    todo = []
    for k, item in enumerate(items):
        if not item.answer.strip():
            out[k] = False
        else:
            todo.append(k)
    if source.kind == "sheet":
        sheet = read_sheet(Path(source.argument))
        for k in todo:
            out[k] = sheet.get(ids[k])
    elif source.kind == "judge":
        verdicts = judge_verdicts([items[k] for k in todo], ctx.client(source.argument))
        for k, verdict in zip(todo, verdicts, strict=True):
            out[k] = verdict.correct
    elif source.kind == "similarity":
        both = [k for k in todo if items[k].correct and items[k].incorrect]
        found = similarity_verdicts([items[k] for k in both], ctx.embedder(embedder))
        for k, verdict in zip(both, found, strict=True):
            out[k] = verdict.correct
    else:
        for k in todo:
            item = items[k]
            if not item.correct:
                continue
            if source.kind == "contains":
                out[k] = contains_gold(item.answer, item.correct) is not None
            elif source.kind == "exact":
                answer = normalise_squad(item.answer)
                out[k] = any(answer == normalise_squad(ref) for ref in item.correct)
            else:
                out[k] = rouge_l(item.answer, item.correct) >= ROUGE_L_CUT
    return out


def disagreement(a: Sequence[bool | None], b: Sequence[bool | None]) -> tuple[int, int]:
    """Items both sources label, and how many of them they label differently."""
    both = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    return len(both), sum(x != y for x, y in both)
