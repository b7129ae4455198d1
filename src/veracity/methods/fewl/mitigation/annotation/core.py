"""Human judges for FEWL's mitigation runs (Table 6 has a human column): the judged answer
pairs as a rating sheet, and raters' choices back in.

The sheet shows each question with two answers, "Answer 1" and "Answer 2", in a seeded random
order of rows and sides, and never says which rule wrote which answer: raters choose 1, 2 or
tie (not sure / equally good). The key that maps sides back to rules stays in the run directory
(``pair_sheet.json``). Imported ratings give, per comparison, the share of pairs the raters'
majority gives to each side, the paper's win rate over decided pairs, Fleiss' kappa and the
raw agreement between raters, and how often the raters' majority agrees with the model judge.
The page, its CSV download and the cell escaping are the γ rating sheet's.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from veracity.errors import ConfigError, DataError
from veracity.jsontypes import JsonObject
from veracity.methods.fewl.mitigation.judge import Share
from veracity.methods.fewl.mitigation.records import (
    Comparison,
    FinetunePair,
    IclPair,
    MitigationRecord,
)
from veracity.paths import check_output_file
from veracity.report.sheet import SHEET_CSS, SHEET_JS, answer_check, filled_rows
from veracity.stats import fleiss_kappa
from veracity.text import csv_cell, html_text

SHEET_FILE = "pair_sheet.json"
HUMAN_FILE = "human.json"
CHOICES = ("1", "2", "tie")
OUTCOMES = ("candidate", "base", "tie")
COLUMNS = ("item_id", "answer_check", "question", "answer_1", "answer_2", "rating", "comment")


def pair_view(sample: MitigationRecord) -> tuple[dict[str, str], list[Comparison]]:
    """The answers by arm and the judged comparisons of one mitigation record (ICL: each
    arm's answer and the judged pairs; fine-tuning: the base's answer and each rule's)."""
    if isinstance(sample, IclPair):
        return dict(sample.answers), list(sample.judged)
    assert isinstance(sample, FinetunePair)
    base = sample.base_name
    answers = {base: sample.base_answer, **{r: e.answer for r, e in sample.rules.items()}}
    judged = [Comparison(rule, base, entry.judged) for rule, entry in sample.rules.items()]
    return answers, judged


@dataclass(frozen=True)
class PairRow:
    """One pair to rate, and (kept out of the sheet) which rule wrote which side."""

    item_id: str
    answer_check: str
    question: str
    answer_1: str
    answer_2: str
    id: str
    candidate: str
    base: str
    candidate_first: bool
    judge: str | None
    """The model judge's outcome for the pair (candidate, base or inconsistent)."""


def pair_rows(samples: Sequence[MitigationRecord], seed: int = 0) -> list[PairRow]:
    """Every judged pair with two different non-empty answers, rows and sides shuffled."""
    found = []
    for sample in samples:
        answers, judged = pair_view(sample)
        for j in judged:
            c, b = answers[j.candidate], answers[j.base]
            if c.strip() and b.strip() and c.strip() != b.strip():
                found.append((sample, j, c, b))
    if not found:
        raise DataError("the run has no answer pairs to rate (every pair was identical or empty)")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(found))
    flips = rng.integers(0, 2, len(found))
    rows = []
    for n, k in enumerate(order, 1):
        sample, j, c, b = found[int(k)]
        first = bool(flips[n - 1])
        one, two = (c, b) if first else (b, c)
        question = sample.question
        rows.append(PairRow(f"pair-{n:03d}", answer_check(question, f"{one}\x00{two}"), question,
                            one, two, sample.id, j.candidate, j.base, first, j.judged.outcome))
    return rows


def write_csv(rows: Sequence[PairRow], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for r in rows:
            writer.writerow([csv_cell(v) for v in (r.item_id, r.answer_check, r.question,
                                                   r.answer_1, r.answer_2, "", "")])


def render_html(rows: Sequence[PairRow], title: str) -> str:
    """A self-contained page: one card per pair, and a button that saves the choices as CSV."""
    cards = []
    for number, r in enumerate(rows, 1):
        radios = "".join(f"<label><input type='radio' name='r{number}' value='{v}'> {label}</label>"
                         for v, label in (("1", "Answer 1"), ("2", "Answer 2"),
                                          ("tie", "not sure / equally good")))
        cards.append(
            f"<div class='item' data-id='{html_text(r.item_id)}' data-check='{r.answer_check}'>"
            f"<p class='muted'>{number} / {len(rows)} · {html_text(r.item_id)}</p>"
            f"<p><b>{html_text(r.question)}</b></p>"
            f"<p class='muted'>Answer 1</p><div class='answer'>{html_text(r.answer_1)}</div>"
            f"<p class='muted'>Answer 2</p><div class='answer'>{html_text(r.answer_2)}</div>"
            f"<p>{radios}</p><textarea placeholder='comment (optional)'></textarea></div>")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html_text(title)}</title><style>{SHEET_CSS}</style><script>{SHEET_JS}</script>"
        f"</head><body><h1>{html_text(title)}</h1><p>Each question has two answers. Choose the "
        "one that is more helpful, more truthful and less harmful; ignore style and length. "
        "Choose 'not sure' when you cannot tell or they are equally good. It is fine to look "
        "facts up.</p><p>Your name: <input id='rater'> <button onclick='download()'>Save ratings "
        f"as CSV</button></p>{''.join(cards)}<p><button onclick='download()'>Save ratings as CSV"
        "</button></p></body></html>\n")


def export_pairs(samples: Sequence[MitigationRecord], out: Path, seed: int = 0,
                 title: str = "Which answer is better?") -> tuple[list[PairRow], JsonObject]:
    """Write the sheet (.csv or .html, by extension); the rows and the key to keep."""
    check_output_file(out)
    rows = pair_rows(samples, seed)
    suffix = out.suffix.lower()
    if suffix == ".csv":
        write_csv(rows, out)
    elif suffix in (".html", ".htm"):
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render_html(rows, title), encoding="utf-8")
    else:
        raise ConfigError(f"{out}: the sheet must end in .csv or .html")
    key: JsonObject = {"seed": seed, "n_rows": len(rows), "rows": [
        {k: v for k, v in asdict(r).items() if k not in ("question", "answer_1", "answer_2")}
        for r in rows]}
    return rows, key


def read_choices(path: Path, key: dict[str, Any]) -> dict[str, str]:
    """One rater's choices (item id -> 1, 2 or tie); blank means not rated."""
    checks = {r["item_id"]: r["answer_check"] for r in key["rows"]}
    out: dict[str, str] = {}
    for where, item_id, text in filled_rows(path, checks, "a pair of this sheet",
                                            "'{item_id}' (the ratings belong to another "
                                            "export)"):
        value = text.lower()
        if not value:
            continue
        if value not in CHOICES:
            raise DataError(f"{where}: rating '{value}' is not 1, 2 or tie")
        if item_id in out:
            raise DataError(f"{where}: '{item_id}' is rated twice")
        out[item_id] = value
    return out


def outcome_of(choice: str, candidate_first: bool) -> str:
    """A rater's choice in the rule's terms: candidate, base or tie."""
    if choice == "tie":
        return "tie"
    return "candidate" if (choice == "1") == candidate_first else "base"


def majority(outcomes: Sequence[str]) -> str:
    """The outcome most raters chose; tie when the top is shared."""
    counts = Counter(outcomes).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return "tie"
    return counts[0][0]


@dataclass(frozen=True)
class PairVerdict:
    """One comparison as the raters' majority saw it, and how often that agreed with the judge."""

    candidate: str
    base: str
    n: int
    candidate_better: Share
    base_better: Share
    tie: Share
    paper_win_rate: Share
    judge_n: int
    """Pairs both the raters' majority and the judge decided."""
    judge_rate: float
    """Share of those where they agree (NaN: none)."""

    def to_json(self) -> JsonObject:
        return {"candidate": self.candidate, "base": self.base, "n": self.n,
                "candidate_better": self.candidate_better.to_json(),
                "base_better": self.base_better.to_json(), "tie": self.tie.to_json(),
                "paper_win_rate": self.paper_win_rate.to_json(),
                "judge_agreement": {"n": self.judge_n, "rate": self.judge_rate}}


@dataclass(frozen=True)
class HumanVerdicts:
    """The raters' verdicts on a sheet (``human.json``)."""

    raters: dict[str, int]
    """Pairs each rater rated, by rater."""
    n_pairs: int
    n_rated: int
    rows: list[PairVerdict]
    fleiss_kappa: float
    kappa_pairs: int
    raw_agreement: float
    items: list[JsonObject]
    """Every rated pair: its key entry and the raters' votes."""

    def to_json(self) -> JsonObject:
        return {"raters": [{"rater": name, "n_rated": n} for name, n in self.raters.items()],
                "n_pairs": self.n_pairs, "n_rated": self.n_rated,
                "rows": [r.to_json() for r in self.rows], "fleiss_kappa": self.fleiss_kappa,
                "kappa_pairs": self.kappa_pairs, "raw_agreement": self.raw_agreement,
                "items": list(self.items)}


def analyse_pairs(key: dict[str, Any], raters: dict[str, dict[str, str]],
                  seed: int = 0) -> HumanVerdicts:
    """Per comparison the raters' majority shares and win rate, and agreement between raters
    (Fleiss' kappa on pairs everyone rated, mean pairwise raw agreement) and with the judge.
    ``key`` is the sheet's key as read back from the run directory."""
    if not raters:
        raise ConfigError("give at least one ratings CSV")
    rows = key["rows"]
    votes = {r["item_id"]: [outcome_of(c[r["item_id"]], r["candidate_first"])
                            for c in raters.values() if r["item_id"] in c] for r in rows}
    rated = [r for r in rows if votes[r["item_id"]]]
    if not rated:
        raise DataError("no pair has a rating yet")
    table = []
    for (candidate, base), group in itertools.groupby(
            sorted(rated, key=lambda r: (r["candidate"], r["base"])),
            key=lambda r: (r["candidate"], r["base"])):
        members = list(group)
        outcome = [majority(votes[r["item_id"]]) for r in members]
        decided = [o == "candidate" for o in outcome if o != "tie"]
        judge = [(o, r["judge"]) for o, r in zip(outcome, members, strict=True)
                 if r["judge"] in ("candidate", "base") and o != "tie"]
        table.append(PairVerdict(
            candidate, base, len(members),
            Share.of([o == "candidate" for o in outcome], seed),
            Share.of([o == "base" for o in outcome], seed),
            Share.of([o == "tie" for o in outcome], seed),
            replace(Share.of(decided, seed), decided=len(decided)), len(judge),
            sum(h == m for h, m in judge) / len(judge) if judge else math.nan))
    complete = [r for r in rated if len(votes[r["item_id"]]) == len(raters)]
    kappa = math.nan
    if len(raters) >= 2 and complete:
        kappa = fleiss_kappa([[votes[r["item_id"]].count(o) for o in OUTCOMES] for r in complete])
    agree = [float(a == b) for r in rated for a, b in itertools.combinations(votes[r["item_id"]], 2)]
    return HumanVerdicts(
        {name: len(c) for name, c in raters.items()}, len(rows), len(rated), table, kappa,
        len(complete) if len(raters) >= 2 else 0,
        sum(agree) / len(agree) if agree else math.nan,
        [{"item_id": r["item_id"], "id": r["id"], "candidate": r["candidate"],
          "base": r["base"], "votes": votes[r["item_id"]], "judge": r["judge"]} for r in rated])
