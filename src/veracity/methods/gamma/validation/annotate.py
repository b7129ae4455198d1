"""Human ratings of answers (paper §4): rating sheets out, several raters' scores back in.

A sheet lists every answer of a run with a stable ``item_id`` and an ``answer_check`` (a hash of
prompt and answer, so ratings never attach to a different answer), the rubric that applies, and
empty ``rating`` / ``comment`` cells. γ is never shown to raters. Imported ratings give Fleiss'
kappa, the mean rating R with its standard error, R for answers with γ < threshold, the share
of answers with γ < threshold, and the paper's Figure 1: mean rating per γ bin with a
least-squares line (slope m, intercept b).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import numpy as np

from veracity.data.sample import Selection
from veracity.errors import ConfigError, DataError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.validation.anchors import anchors_html, resolve_anchors
from veracity.paths import check_output_file, user_path
from veracity.report.sheet import SHEET_CSS, SHEET_JS, answer_check, filled_rows
from veracity.stats import binned_means, fleiss_kappa, linear_fit, mean_stderr, pearson
from veracity.text import csv_cell, html_text

Kind = Literal["qa", "code"]
RUBRIC_CHOICES = ("auto", "qa", "code")
SCALE = range(0, 6)


@dataclass(frozen=True)
class Rubric:
    """The scale raters use: one 0-5 wording per kind of answer, and how a row's kind is chosen
    (``auto``: code for programming questions, else qa; ``qa`` / ``code``: that one for all)."""

    name: str
    scales: dict[Kind, tuple[str, ...]]
    choose: str = "auto"

    @property
    def id(self) -> str:
        """Name plus a hash of the wording: ratings with different ids are never pooled."""
        text = json.dumps({k: list(v) for k, v in sorted(self.scales.items())}, ensure_ascii=False)
        return f"{self.name}@{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}"

    def kind_of(self, prompt: str, metadata: dict[str, Any] | None) -> Kind:
        if self.choose == "auto":
            return "code" if is_programming(prompt, metadata) else "qa"
        return "code" if self.choose == "code" else "qa"


def read_rubric(path: Path) -> Rubric:
    """A rubric file: six lines ``0: ...`` to ``5: ...`` for every answer, or a ``[qa]`` and a
    ``[code]`` section of six lines each (blank lines and ``#`` comments are skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read rubric file {path}: {exc}") from None
    return Rubric(f"file:{path.name}", parse_rubric(text, str(path)))


def parse_rubric(text: str, where: str) -> dict[Kind, tuple[str, ...]]:
    """The scales of a rubric text (the format of ``read_rubric``)."""
    sections: dict[str, list[str]] = {}
    current = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        header = re.fullmatch(r"\[(qa|code)\]", line)
        if header:
            current = header.group(1)
            if current in sections:
                raise ConfigError(f"{where}, line {number}: a second [{current}] section")
            sections[current] = []
            continue
        point = sections.setdefault(current, [])
        if not re.match(rf"{len(point)}\s*:", line):
            raise ConfigError(f"{where}, line {number}: expected '{len(point)}: ...' (each scale "
                              "lists 0 to 5 in order)")
        point.append(line)
    if "" in sections and len(sections) > 1:
        raise ConfigError(f"{where}: lines outside a section beside [qa] / [code] sections")
    if "" not in sections and set(sections) != {"qa", "code"}:
        raise ConfigError(f"{where}: give six lines 0-5, or both a [qa] and a [code] section")
    for name, lines in sections.items():
        if len(lines) != len(SCALE):
            raise ConfigError(f"{where}: {f'[{name}] ' if name else ''}has {len(lines)} scale "
                              f"lines; the scale is 0 to 5 (six lines)")
    if "" in sections:
        return {"qa": tuple(sections[""]), "code": tuple(sections[""])}
    return {"qa": tuple(sections["qa"]), "code": tuple(sections["code"])}


# the built-in scales (after the paper's Tables 5 and 6, in our words), from the package data
RUBRICS: dict[Kind, tuple[str, ...]] = parse_rubric(
    (files("veracity.data") / "rubrics.txt").read_text(encoding="utf-8"), "veracity/data/rubrics.txt")


def resolve_rubric(spec: str | Rubric) -> Rubric:
    """A built-in choice (auto, qa, code) or a rubric file."""
    if isinstance(spec, Rubric):
        return spec
    if spec in RUBRIC_CHOICES:
        return Rubric(spec, dict(RUBRICS), spec)
    path = user_path(spec)
    if not path.is_file():
        raise ConfigError(f"unknown rubric '{spec}': not one of {', '.join(RUBRIC_CHOICES)} and "
                          "not a file")
    return read_rubric(path)


SHEET_COLUMNS = ("item_id", "answer_check", "kind", "question", "answer", "rating", "comment",
                 "rubric")
_CODE_WORDS = re.compile(
    r"\b(python|javascript|typescript|java|c\+\+|golang|kotlin|sql|regex|regular expression|"
    r"bash|powershell|source code|code snippet|programming|compiler|algorithm|recursion|"
    r"stack trace|write (a|an) (function|program|script|class|method|query))\b|```|\bdef \w+\(",
    re.IGNORECASE,
)


def is_programming(question: str, metadata: dict[str, Any] | None = None) -> bool:
    """A programming question: metadata says so (kind/category/domain), or code words appear."""
    for key in ("kind", "category", "domain", "type"):
        value = str((metadata or {}).get(key, "")).lower()
        if value in ("code", "coding", "programming", "programmingqa"):
            return True
    return bool(_CODE_WORDS.search(question))


@dataclass(frozen=True)
class SheetRow:
    """One answer to rate."""

    item_id: str
    answer_check: str
    kind: Kind
    question: str
    answer: str


def sheet_rows(records: Sequence[dict[str, Any]], rubric: str | Rubric = "auto") -> list[SheetRow]:
    """Rows of a rating sheet, in run order; repeated record ids get ``#2``, ``#3``, ..."""
    chosen = resolve_rubric(rubric)
    seen: dict[str, int] = {}
    rows: list[SheetRow] = []
    for record in records:
        base = str(record.get("id", f"item-{len(rows) + 1}"))
        seen[base] = seen.get(base, 0) + 1
        item_id = base if seen[base] == 1 else f"{base}#{seen[base]}"
        prompt, answer = str(record["prompt"]), str(record["answer"])
        kind = chosen.kind_of(prompt, record.get("metadata"))
        rows.append(SheetRow(item_id, answer_check(prompt, answer), kind, prompt, answer))
    if not rows:
        raise DataError("the run has no answers to rate")
    return rows


def write_csv(rows: Sequence[SheetRow], path: Path, rubric: Rubric | None = None) -> None:
    """A spreadsheet-friendly sheet; the rubric of each row is in its last column."""
    scales = (rubric or resolve_rubric("auto")).scales
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(SHEET_COLUMNS)
        for r in rows:
            writer.writerow([csv_cell(cell) for cell in (
                r.item_id, r.answer_check, r.kind, r.question, r.answer, "", "",
                " | ".join(scales[r.kind]))])


def render_html(rows: Sequence[SheetRow], title: str, rubric: Rubric | None = None,
                anchors: str = "") -> str:
    """A self-contained page: rubrics, worked examples (``anchors``, HTML), one card per
    answer, and a button that saves a CSV."""
    scales = (rubric or resolve_rubric("auto")).scales
    kinds = list(dict.fromkeys(r.kind for r in rows))
    names = {"qa": "Questions and answers", "code": "Programming questions"}
    rubrics = "".join(
        f"<h3>{names[k]}</h3><ul>{''.join(f'<li>{html_text(line)}</li>' for line in scales[k])}</ul>"
        for k in kinds
    )
    cards = []
    for number, r in enumerate(rows, 1):
        radios = "".join(
            f"<label><input type='radio' name='r{number}' value='{v}'> {v}</label>" for v in SCALE
        )
        cards.append(
            f"<div class='item' data-id='{html_text(r.item_id)}' data-check='{r.answer_check}'>"
            f"<p class='muted'>{number} / {len(rows)} · {html_text(r.item_id)} · rubric: "
            f"{names[r.kind]}</p><p><b>{html_text(r.question)}</b></p>"
            f"<div class='answer'>{html_text(r.answer) or '<i>(empty answer)</i>'}</div>"
            f"<p>{radios}</p><textarea placeholder='comment (optional)'></textarea></div>"
        )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html_text(title)}</title><style>{SHEET_CSS}</style><script>{SHEET_JS}</script>"
        f"</head><body><h1>{html_text(title)}</h1><p>Rate each answer from 0 to 5 with the rubric "
        "below. Judge the answer only; it is fine to look facts up.</p>"
        f"{rubrics}<p>Your name: <input id='rater'> <button onclick='download()'>Save ratings "
        f"as CSV</button></p>{anchors}"
        f"{''.join(cards)}<p><button onclick='download()'>Save ratings as CSV</button></p>"
        "</body></html>\n"
    )


def export_sheet(records: Sequence[dict[str, Any]], out: Path, rubric: str | Rubric = "auto",
                 title: str = "Rating sheet", selection: Selection | None = None,
                 anchors: str | None = None) -> list[SheetRow]:
    """Write a sheet as CSV or HTML, by the extension of ``out``; with ``selection``, only
    those answers (e.g. the paper's 100 random questions per model and corpus); with
    ``anchors`` (``paper``), the paper's rated examples above them (HTML only)."""
    check_output_file(out)
    examples = anchors_html(resolve_anchors(anchors))
    if examples and out.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"{out}: anchor examples are shown on an HTML sheet (.html); a CSV "
                          "sheet holds only the answers to rate")
    chosen = resolve_rubric(rubric)
    rows = sheet_rows(records, chosen)  # ids are numbered over the whole run
    if selection is not None:
        rows = selection.apply(rows)
    suffix = out.suffix.lower()
    if suffix == ".csv":
        write_csv(rows, out, chosen)
    elif suffix in (".html", ".htm"):
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render_html(rows, title, chosen, examples), encoding="utf-8")
    else:
        raise ConfigError(f"{out}: the sheet must end in .csv or .html")
    return rows


@dataclass(frozen=True)
class RaterSheet:
    """One rater's ratings by item id."""

    rater: str
    path: str
    ratings: dict[str, int]


def read_ratings(path: Path, rows: Sequence[SheetRow], rater: str | None = None) -> RaterSheet:
    """Read a filled-in sheet; blank ratings mean "not rated", anything else must be 0-5."""
    ratings: dict[str, int] = {}
    checks = {r.item_id: r.answer_check for r in rows}
    for where, item_id, value in filled_rows(path, checks, "an answer of this run",
                                             "item '{item_id}' (the sheet was made from a "
                                             "different run)"):
        if not value:
            continue
        if not re.fullmatch(r"[0-5]", value):
            raise DataError(f"{where}: rating '{value}' is not an integer from 0 to 5")
        if item_id in ratings:
            raise DataError(f"{where}: item '{item_id}' is rated twice")
        ratings[item_id] = int(value)
    return RaterSheet(rater or path.stem, str(path), ratings)


def read_all(paths: Sequence[Path], rows: Sequence[SheetRow]) -> list[RaterSheet]:
    """Every rater's sheet; raters are named by file stem (the path when stems repeat)."""
    if not paths:
        raise ConfigError("give at least one ratings CSV")
    stems = [p.stem for p in paths]
    return [read_ratings(p, rows, p.stem if stems.count(p.stem) == 1 else str(p)) for p in paths]


def gamma_edges(values: Sequence[float], bins: int = 10) -> list[float]:
    """Equal-width bins from 0 to the largest γ rounded up to a multiple of 0.05."""
    top = max((float(v) for v in values), default=0.0)
    upper = max(math.ceil(round(top * 20, 9)) / 20, 0.05)
    return [float(e) for e in np.linspace(0.0, upper, bins + 1)]


@dataclass(frozen=True)
class RatingBin:
    """Mean rating of the answers in one γ bin [lo, hi), with its standard error."""

    lo: float
    hi: float
    n: int
    mean: float
    stderr: float
    centre: float


@dataclass(frozen=True)
class RatedItem:
    """One rated answer: its γ, every rating it got and their mean."""

    item_id: str
    gamma: float | None
    ratings: list[int]
    mean_rating: float


@dataclass(frozen=True)
class RatingsAnalysis:
    """Agreement between raters, the mean rating overall and below the threshold, and
    Figure 1 (mean rating per γ bin, its line, and the per-answer correlation)."""

    raters: tuple[RaterSheet, ...]
    n_items: int
    n_rated: int
    fleiss_kappa: float
    kappa_items: int
    """Answers rated by every rater (the ones kappa is taken over)."""
    mean_rating: float
    mean_rating_stderr: float
    threshold: float
    n_below_threshold: int
    share_below_threshold: float
    mean_rating_below_threshold: float
    mean_rating_below_threshold_stderr: float
    bins: tuple[RatingBin, ...]
    slope: float
    intercept: float
    pearson_r: float
    pearson_p: float
    items: tuple[RatedItem, ...]

    def to_json(self) -> JsonObject:
        return {
            "raters": [{"rater": s.rater, "file": s.path, "n_rated": len(s.ratings)}
                       for s in self.raters],
            "n_items": self.n_items,
            "n_rated": self.n_rated,
            "fleiss_kappa": self.fleiss_kappa,
            "kappa_items": self.kappa_items,
            "mean_rating": self.mean_rating,
            "mean_rating_stderr": self.mean_rating_stderr,
            "threshold": self.threshold,
            "n_below_threshold": self.n_below_threshold,
            "share_below_threshold": self.share_below_threshold,
            "mean_rating_below_threshold": self.mean_rating_below_threshold,
            "mean_rating_below_threshold_stderr": self.mean_rating_below_threshold_stderr,
            "bins": [asdict(b) for b in self.bins],
            "fit": {"slope": self.slope, "intercept": self.intercept,
                    "on": "bin centres vs bin means"},
            "pearson": {"r": self.pearson_r, "p": self.pearson_p,
                        "on": "per-answer γ vs mean rating"},
            "items": [asdict(item) for item in self.items],
        }


def analyse_ratings(
    records: Sequence[dict[str, Any]], sheets: Sequence[RaterSheet], threshold: float = 0.05,
    bins: int = 10, rubric: str | Rubric = "auto",
) -> RatingsAnalysis:
    """Agreement, mean ratings and Figure 1 for the rated answers of a gamma run."""
    rows = sheet_rows(records, rubric)
    gamma = {r.item_id: rec.get("gamma") for r, rec in zip(rows, records, strict=True)}
    item_ratings = {r.item_id: [s.ratings[r.item_id] for s in sheets if r.item_id in s.ratings]
                    for r in rows}
    rated = [i for i, v in item_ratings.items() if v]
    if not rated:
        raise DataError("no answer has a rating yet")
    mean_rating = {i: float(np.mean(item_ratings[i])) for i in rated}
    complete = [i for i in rated if len(item_ratings[i]) == len(sheets)]
    kappa = math.nan
    if len(sheets) >= 2 and complete:
        table = [[item_ratings[i].count(v) for v in SCALE] for i in complete]
        kappa = fleiss_kappa(table)
    r_all, r_all_se = mean_stderr([mean_rating[i] for i in rated])
    scored = [i for i in rated if gamma[i] is not None]
    below = [i for i in scored if float(gamma[i]) < threshold]  # type: ignore[arg-type]
    r_low, r_low_se = mean_stderr([mean_rating[i] for i in below])
    xs = [float(gamma[i]) for i in scored]  # type: ignore[arg-type]
    ys = [mean_rating[i] for i in scored]
    edges = gamma_edges(xs, bins)
    binned = tuple(RatingBin(float(b["lo"]), float(b["hi"]), int(b["n"]), float(b["mean"]),
                             float(b["stderr"]), (b["lo"] + b["hi"]) / 2)
                   for b in binned_means(xs, ys, edges))
    filled = [b for b in binned if b.n]
    slope, intercept = linear_fit([b.centre for b in filled], [b.mean for b in filled])
    r, p = pearson(xs, ys)
    return RatingsAnalysis(
        raters=tuple(sheets),
        n_items=len(rows),
        n_rated=len(rated),
        fleiss_kappa=kappa,
        kappa_items=len(complete) if len(sheets) >= 2 else 0,
        mean_rating=r_all,
        mean_rating_stderr=r_all_se,
        threshold=threshold,
        n_below_threshold=len(below),
        share_below_threshold=len(below) / len(scored) if scored else math.nan,
        mean_rating_below_threshold=r_low,
        mean_rating_below_threshold_stderr=r_low_se,
        bins=binned,
        slope=slope, intercept=intercept, pearson_r=r, pearson_p=p,
        items=tuple(RatedItem(i, gamma[i], item_ratings[i], mean_rating[i]) for i in rated),
    )

