"""The DB-MMLU paper's published numbers: Table 1 (the ten models' size and Open LLM
Leaderboard scores, kept with the model-info reader as ``--model-info paper``), Table 3
(their results) as reference points, and what the text states about each relation of
Figures A8-A11, so a comparison can print the paper's value beside the one it computes.

Sources, all from *Deception-Based Benchmarking* (preprint 2024): Table 1, whose footnote
gives the scores' source (the Hugging Face Open LLM Leaderboard); Table 3; §5.1-5.3 for the
correlations and the footnote on their p-values (t = r·√(n−2)/√(1−r²), n = 10, 8 degrees of
freedom)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from veracity.data.model_info import PAPER, TABLE1, paper_model_info
from veracity.methods.deception.compare.core import CORRECTNESS, ModelSummary

__all__ = ["PAPER", "STATED", "TABLE1", "TABLE3", "Stated", "paper_model_info", "stated",
           "table3_summaries"]

# model: normal accuracy %, misleading accuracy %, susceptibility, consistency %
TABLE3: dict[str, tuple[float, float, float, float]] = {
    "Gemma-1.1-2b-it": (34.88, 18.92, 2.53, 45.18),
    "Phi-2": (45.22, 20.60, 2.39, 38.05),
    "Phi-3-mini-4k-instruct": (68.01, 41.81, 1.63, 53.60),
    "Phi-3-medium-4k-instruct": (77.42, 40.71, 1.90, 48.29),
    "Mistral-7b-instruct-v0.2": (52.07, 31.40, 1.65, 44.38),
    "Meta-Llama-3-8B-Instruct": (52.41, 30.87, 1.75, 46.46),
    "DeciLM-7B-instruct": (51.84, 25.17, 2.21, 39.12),
    "Aya-23-8B": (48.61, 20.37, 2.65, 35.36),
    "Solar-10.7B-Instruct": (62.72, 52.36, 1.20, 68.26),
    "StarChat2-15B-v0.1": (44.29, 26.93, 1.69, 45.44),
}


@dataclass(frozen=True)
class Stated:
    """What the paper's text says about one relation (None: it states no number)."""

    r: float | None
    p: float | None
    where: str

    def text(self) -> str:
        if self.r is None:
            return f"the paper's text states no r ({self.where})"
        p = "" if self.p is None else f", p = {self.p:.3f}"
        return f"the paper states r = {self.r:+.2f}{p} ({self.where})"


STATED: dict[tuple[str, str], Stated] = {
    ("A8", "normal accuracy %"): Stated(0.81, None, "§5.1"),
    # the extracted text prints "r = 0.91"; the fit of Figure A9 falls (lower susceptibility
    # goes with a higher TruthfulQA score), so the sign is read as negative
    ("A9", "truthfulqa"): Stated(-0.91, None, "§5.2, n = 8"),
    ("A10", "model size (billions of parameters)"): Stated(-0.45, 0.192, "§5.2"),
    ("A10", "normal accuracy %"): Stated(-0.54, 0.107, "§5.2"),
    ("A11", "consistency %"): Stated(None, None, "§5.3 names the correlation only"),
}
"""(relation key, x axis label) -> the paper's statement. Its p-values are those of the rounded
r (t = r·√8/√(1−r²)): r = −0.45 gives 0.192 and −0.54 gives 0.107, where Table 3's unrounded
values give 0.189 and 0.110."""


def stated(key: str, x_label: str) -> Stated | None:
    """The paper's statement on a relation, if it makes one."""
    return STATED.get((key, x_label))


def table3_summaries() -> list[ModelSummary]:
    """Table 3's ten models as comparison summaries (fractions, as runs give them), so the
    relations of Figures A8-A11 can be computed from the published numbers alone. Only the four
    published figures are set; the per-subject and per-question parts are empty."""
    out = []
    for model, (normal, misleading, susceptibility, consistency) in TABLE3.items():
        out.append(ModelSummary(
            label=model, model=model, n_items=0, normal_accuracy=normal / 100,
            misleading_accuracy=misleading / 100, susceptibility=susceptibility,
            susceptibility_unbounded=False, consistency=consistency / 100,
            consistent_correct=math.nan, consistent_incorrect=math.nan,
            error_rate_normal=math.nan, error_rate_misleading=math.nan, threshold=0.4,
            subjects=(), consistency_by_subject={},
            by_correctness={group: () for group in CORRECTNESS}))
    return out
