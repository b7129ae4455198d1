"""``veracity calibrate --risk α``: a risk-controlled threshold from labelled answers, as a file a
gateway policy reads (``calibration = "FILE"``) and as lines for people."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from veracity.decisions.labelled import LabelledScores
from veracity.decisions.risk import RiskThreshold, risk_threshold
from veracity.errors import DataError
from veracity.jsontypes import JsonObject
from veracity.store import dumps

PROCEDURE = ("Learn-then-Test fixed-sequence testing with the exact binomial p-value "
             "(Angelopoulos et al. 2021, arXiv:2110.01052)")
KIND = "veracity-risk-threshold"


@dataclass(frozen=True)
class RiskCalibration:
    """A certified threshold in the method's own units, and where it came from."""

    scores: LabelledScores
    result: RiskThreshold

    @property
    def threshold(self) -> float | None:
        """In the method's units; an answer passes at ``value ≤ t`` (``≥`` when higher is better)."""
        t = self.result.threshold
        return None if t is None else self.scores.to_method_units(t)

    @property
    def rule(self) -> str:
        if self.threshold is None:
            return "pass nothing"
        sign = "≥" if self.scores.higher_is_better else "≤"
        return f"{self.scores.metric} {sign} {self.threshold:.6g}"

    def to_dict(self) -> JsonObject:
        r = self.result
        return {"kind": KIND, "procedure": PROCEDURE, "method": self.scores.method,
                "score": self.scores.metric, "higher_is_better": self.scores.higher_is_better,
                "alpha": r.alpha, "delta": r.delta, "threshold": self.threshold, "rule": self.rule,
                "n": r.n, "n_wrong": r.n_wrong, "left_out": self.scores.left_out,
                "passed": r.passed, "coverage": r.coverage, "errors_among_passed": r.errors,
                "error_among_passed": r.error_among_passed, "p_value": r.p_value,
                "candidates_tested": r.tested, "runs": list(self.scores.runs)}

    def lines(self) -> list[str]:
        r = self.result
        err = "—" if r.error_among_passed is None else f"{r.error_among_passed:.3f}"
        head = (f"{self.scores.method} ({self.scores.metric}, "
                f"{'higher' if self.scores.higher_is_better else 'lower'} = more trustworthy): "
                f"{r.n} labelled answers, {r.n_wrong} wrong"
                + (f"; {self.scores.left_out} left out (no score or no label)"
                   if self.scores.left_out else ""))
        if r.threshold is None:
            body = (f"no threshold keeps the error among passed answers ≤ {r.alpha:g} with "
                    f"confidence {1 - r.delta:g}: pass nothing (or label more answers)")
        else:
            body = (f"threshold: pass when {self.rule}\n"
                    f"coverage {r.coverage:.3f} ({r.passed} of {r.n} passed), {r.errors} wrong "
                    f"among them ({err}); p-value {r.p_value:.4g} ≤ δ")
        return [head, body, f"α = {r.alpha:g}, δ = {r.delta:g}, n = {r.n}; {PROCEDURE}"]


def calibrate_risk(scores: LabelledScores, alpha: float, delta: float,
                   out: Path | None = None) -> RiskCalibration:
    """The certified threshold of ``scores``; written to ``out`` (JSON) when given."""
    if not scores.values:
        raise DataError(f"runs {', '.join(scores.runs)} have no answer with both a score and a label")
    found = RiskCalibration(scores, risk_threshold(scores.u(), scores.wrong, alpha, delta))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dumps(found.to_dict(), indent=2) + "\n", encoding="utf-8")
    return found
