"""Table 8 of the γ paper as published (Kersting et al. 2024), shown beside a user's Table 8 for
reference. Values are as printed: "0.072(2)" is 0.072 with an uncertainty of 2 in the last digit
(0.002); ⟨γ⟩ is in the authors' code's form, the threshold 0.05 in that form too. Llama2-7B and
MPT-7B were rated on Web QA only."""

from __future__ import annotations

import re
from typing import Literal, TypedDict

from veracity.errors import InvalidValueError
from veracity.report.html import esc

DOMAINS = ("Web QA", "TruthfulQA", "Programming QA")
QUESTIONS = {"Web QA": 1200, "TruthfulQA": 817, "Programming QA": 1000}
"""Questions whose γ the distributions cover (§4: 1,200 Web QA, all 800+ TruthfulQA (817), 1,000
Programming QA): the weights of the paper's rankings over domains, as we read them."""

# domain: model -> (⟨γ⟩, R, R for γ < 0.05, % of answers with γ < 0.05), as printed
PUBLISHED: dict[str, dict[str, tuple[str, str, str, int]]] = {
    "Web QA": {
        "GPT-4": ("0.072(2)", "4.41(8)", "4.58(11)", 39),
        "ChatGPT": ("0.072(2)", "4.31(9)", "4.21(13)", 58),
        "Smaug-72B": ("0.073(2)", "4.21(9)", "4.23(12)", 43),
        "Mixtral-8x7B": ("0.094(2)", "4.10(8)", "4.00(18)", 24),
        "Claude-2.1": ("0.103(1)", "4.12(9)", "4.58(12)", 12),
        "Llama2-7B": ("0.120(2)", "3.41(12)", "3.80(27)", 13),
        "MPT-7B": ("0.164(3)", "2.99(14)", "3.81(40)", 8),
    },
    "TruthfulQA": {
        "GPT-4": ("0.108(3)", "4.14(9)", "4.36(13)", 38),
        "ChatGPT": ("0.098(3)", "3.72(10)", "3.91(18)", 35),
        "Smaug-72B": ("0.107(2)", "4.14(8)", "4.54(14)", 18),
        "Mixtral-8x7B": ("0.130(2)", "4.03(9)", "4.28(18)", 17),
        "Claude-2.1": ("0.126(2)", "3.86(9)", "4.41(24)", 6),
    },
    "Programming QA": {
        "GPT-4": ("0.090(2)", "4.59(6)", "4.83(10)", 43),
        "ChatGPT": ("0.092(2)", "4.38(7)", "4.63(10)", 21),
        "Smaug-72B": ("0.216(6)", "4.35(8)", "4.78(10)", 14),
        "Mixtral-8x7B": ("0.120(2)", "4.23(8)", "3.90(37)", 9),
        "Claude-2.1": ("0.108(2)", "4.45(7)", "4.77(13)", 10),
    },
}

_PRINTED = re.compile(r"(\d+)\.(\d+)\((\d+)\)")


def uncertain(printed: str) -> tuple[float, float]:
    """A printed value and its uncertainty in the last digits: "4.41(8)" -> (4.41, 0.08)."""
    match = _PRINTED.fullmatch(printed)
    if match is None:
        raise InvalidValueError(f"not a value with an uncertainty: {printed!r}")
    decimals = len(match.group(2))
    return float(f"{match.group(1)}.{match.group(2)}"), int(match.group(3)) / 10 ** decimals


class PublishedCell(TypedDict):
    """One model's figures in one domain: each value with its uncertainty, the share a
    fraction."""

    mean_gamma: tuple[float, float]
    R: tuple[float, float]
    R_below: tuple[float, float]
    share_below: float


def published() -> dict[str, dict[str, PublishedCell]]:
    """Table 8 as data: per domain and model, each figure and its uncertainty."""
    return {domain: {model: {"mean_gamma": uncertain(gamma), "R": uncertain(rating),
                             "R_below": uncertain(below), "share_below": share / 100}
                     for model, (gamma, rating, below, share) in models.items()}
            for domain, models in PUBLISHED.items()}


def ranking(value: Literal["mean_gamma", "R", "R_below", "share_below"],
            weights: dict[str, float] | None = None) -> list[tuple[str, float]]:
    """The models rated in every domain, ordered by ``value`` (R or share_below) averaged over
    the domains with ``weights`` (default: the questions per domain)."""
    data, w = published(), weights or {d: float(n) for d, n in QUESTIONS.items()}
    models = [m for m in PUBLISHED["Web QA"] if all(m in PUBLISHED[d] for d in DOMAINS)]
    scores = []
    for model in models:
        total = sum(w[d] for d in DOMAINS)
        figure = [data[d][model][value] for d in DOMAINS]
        numbers = [f[0] if isinstance(f, tuple) else f for f in figure]
        scores.append((model, sum(w[d] * x for d, x in zip(DOMAINS, numbers, strict=True)) / total))
    return sorted(scores, key=lambda s: -s[1])


def published_html() -> str:
    """The published table, one row per model, one cell per domain, for reference."""
    models = list(PUBLISHED["Web QA"])
    head = "".join(f"<th>{esc(h)}</th>" for h in ["model", *DOMAINS])
    rows = []
    for model in models:
        cells = []
        for domain in DOMAINS:
            found = PUBLISHED[domain].get(model)
            cells.append("—" if found is None else
                         f"⟨γ⟩ {found[0]}<br>%γ&lt;0.05: {found[3]}%<br>R {found[1]}<br>"
                         f"R<sub>γ&lt;0.05</sub> {found[2]}")
        rows.append(f"<tr><td>{esc(model)}</td>"
                    + "".join(f"<td class='num'>{c}</td>" for c in cells) + "</tr>")
    return ("<div class='scroll'><table><thead><tr>" + head + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div><p class='muted'>As printed in the paper "
            "(Table 8; GPT-4 and the others as of March 2024, ada-002 embeddings, γ in the "
            "authors' code's form): a reference for the table above, not a run.</p>")
