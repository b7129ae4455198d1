"""γ's typed per-item record and run summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from veracity.jsontypes import JsonObject
from veracity.records import Record, RecordError, json_object, number
from veracity.stats import Histogram


@dataclass(frozen=True)
class GammaRecord(Record):
    """One prompt's harmonic γ: its answer, the ball and the answers along it."""

    id: str
    prompt: str
    answer: str
    gamma: float | None
    """None = unscored (see ``error``)."""
    form: str = "sin"
    n: int = 0
    ball: str = ""
    seed: int = 0
    model: str = ""
    embedder: str = ""
    perturbed_prompts: tuple[str, ...] = ()
    perturbed_answers: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    error: RecordError | None = None
    replaced_chars: int | None = None
    """Characters of the answers that were not valid text (None: recorded answers)."""
    perturbed_cosines: tuple[float | None, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def p_correct(self) -> float | None:
        """P(correct) from a calibration, when the run had one."""
        value = self.extra.get("p_correct")
        return None if value is None else float(value)

    @property
    def verdict(self) -> str | None:
        """trustworthy / uncertain / untrustworthy / unscored, when the run was calibrated."""
        value = self.extra.get("verdict")
        return None if value is None else str(value)

    @property
    def finish_reason(self) -> str | None:
        """Why the centre answer ended (``length``: cut at max tokens), when generated."""
        value = self.extra.get("finish_reason")
        return None if value is None else str(value)

    @property
    def perturbed_truncated(self) -> int:
        """How many perturbed answers were cut at max tokens (0 when not recorded)."""
        return int(self.extra.get("perturbed_truncated") or 0)

    def with_extra(self, **keys: Any) -> GammaRecord:
        """The record with untyped keys added (a control's or a calibration's), written after
        the ones it has."""
        return replace(self, extra={**self.extra, **keys})

    @property
    def gamma_null(self) -> float | None:
        """γ of numerical noise alone, when the numeric control ran."""
        value = self.extra.get("gamma_null")
        return None if value is None else float(value)

    @classmethod
    def from_json(cls, data: Any) -> GammaRecord:
        """A record as samples.jsonl holds it."""
        typed, rest = cls._split(json_object(data, "gamma record"))
        error = RecordError.from_json(typed.pop("error", None), rest.pop("error_kind", None))
        for name in ("perturbed_prompts", "perturbed_answers", "references"):
            typed[name] = tuple(typed.get(name) or ())
        if typed.get("perturbed_cosines") is not None:
            typed["perturbed_cosines"] = tuple(typed["perturbed_cosines"])
        typed["metadata"] = dict(typed.get("metadata") or {})
        typed["id"] = str(typed.get("id", ""))
        return cls(**typed, error=error, extra=rest)

    def to_json(self) -> JsonObject:
        """The samples.jsonl shape (the one ``--json`` prints)."""
        out = self._typed_json()
        error = out.pop("error")
        cosines = out.pop("perturbed_cosines")
        replaced = out.pop("replaced_chars")
        out |= {"perturbed_prompts": list(self.perturbed_prompts),
                "perturbed_answers": list(self.perturbed_answers),
                "references": list(self.references), "metadata": dict(self.metadata),
                "error": None if error is None else error.message,
                "error_kind": None if error is None else error.kind.value}
        if replaced is not None:
            out["replaced_chars"] = replaced
        if cosines is not None:
            out["perturbed_cosines"] = list(cosines)
        return out | dict(self.extra)


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class GivenCut:
    """A threshold as the user gave it: its value and the γ form it is written in."""

    value: float
    form: str


def cut_text(value: float, form: str | None, given: GivenCut | None) -> str:
    """``γ < 0.0707 (sin; given 0.05 paper-code)``: a threshold ``value`` in ``form`` as
    applied, and as given."""
    shown = f"γ < {value:.4g}" + (f" ({form}" if form else "")
    if given and (given.form != form or given.value != value):
        shown += f"; given {given.value:g} {given.form}"
    return shown + (")" if form else "")


@dataclass(frozen=True)
class GammaAggregate:
    """γ over a run's items: counts, mean ± s.e., median, the share below the threshold, the
    histogram and how many answers were cut at max tokens."""

    n_items: int
    n_scored: int
    n_unscored: int
    mean: float | None
    """NaN (None once read back) when no item was scored; so are ``stderr``, ``median`` and
    ``share_below_threshold``."""
    stderr: float | None
    median: float | None
    threshold: float
    """In the run's γ form."""
    share_below_threshold: float | None
    histogram: Histogram
    n_truncated: int | None = 0
    """Answers cut at max tokens (None: a run made before they were counted)."""
    n_perturbed_truncated: int | None = 0
    threshold_form: str | None = None
    """The form ``threshold`` is in, when named."""
    threshold_given: GivenCut | None = None

    @classmethod
    def from_json(cls, data: Any) -> GammaAggregate:
        found = json_object(data, "gamma aggregate")
        given = found.get("threshold_given")
        return cls(int(found["n_items"]), int(found["n_scored"]),
                   int(found.get("n_unscored") or 0), number(found["mean"]),
                   number(found["stderr"]), number(found["median"]), float(found["threshold"]),
                   number(found["share_below_threshold"]),
                   Histogram.from_json(json_object(found["histogram"], "histogram")),
                   _count(found.get("n_truncated")), _count(found.get("n_perturbed_truncated")),
                   found.get("threshold_form"),
                   None if not given else GivenCut(float(given["value"]), str(given["form"])))

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "n_items": self.n_items, "n_scored": self.n_scored, "n_unscored": self.n_unscored,
            "mean": self.mean, "stderr": self.stderr, "median": self.median,
            "threshold": self.threshold, "share_below_threshold": self.share_below_threshold,
            "histogram": self.histogram.to_json(), "n_truncated": self.n_truncated,
            "n_perturbed_truncated": self.n_perturbed_truncated,
        }
        if self.threshold_form is not None:
            out["threshold_form"] = self.threshold_form
        if self.threshold_given is not None:
            out["threshold_given"] = {"value": self.threshold_given.value,
                                      "form": self.threshold_given.form}
        return out

    def threshold_text(self) -> str:
        """The threshold applied, and as given (:func:`cut_text`)."""
        return cut_text(self.threshold, self.threshold_form, self.threshold_given)


@dataclass(frozen=True)
class ControlSummary:
    """The numeric null control over a run (results.json's ``control``): γ against γ_null, the
    γ of numerical noise alone, over the items that have both (NaN, None once read back, when
    none has)."""

    n: int
    """Compute paths."""
    variations: tuple[JsonObject, ...]
    """Each path as run.json's ``control.variations`` records it."""
    n_scored: int
    mean_gamma: float | None
    stderr_gamma: float | None
    mean_gamma_null: float | None
    stderr_gamma_null: float | None
    mean_gamma_minus_null: float | None
    gamma_null_p95: float | None
    share_above_null_p95: float | None
    share_above_own_null: float | None
    share_null_identical: float | None
    kind: str = "numeric"

    @classmethod
    def from_json(cls, data: Any) -> ControlSummary:
        found = json_object(data, "control")
        return cls(int(found.get("n") or 0),
                   tuple(json_object(v, "control variation") for v in found.get("variations") or ()),
                   int(found.get("n_scored") or 0), number(found.get("mean_gamma")),
                   number(found.get("stderr_gamma")), number(found.get("mean_gamma_null")),
                   number(found.get("stderr_gamma_null")),
                   number(found.get("mean_gamma_minus_null")), number(found.get("gamma_null_p95")),
                   number(found.get("share_above_null_p95")),
                   number(found.get("share_above_own_null")),
                   number(found.get("share_null_identical")), str(found.get("kind", "numeric")))

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "n": self.n, "variations": list(self.variations),
                "n_scored": self.n_scored, "mean_gamma": self.mean_gamma,
                "stderr_gamma": self.stderr_gamma, "mean_gamma_null": self.mean_gamma_null,
                "stderr_gamma_null": self.stderr_gamma_null,
                "mean_gamma_minus_null": self.mean_gamma_minus_null,
                "gamma_null_p95": self.gamma_null_p95,
                "share_above_null_p95": self.share_above_null_p95,
                "share_above_own_null": self.share_above_own_null,
                "share_null_identical": self.share_null_identical}


@dataclass(frozen=True)
class GammaSummary:
    """γ over a run's items: how many were scored, mean ± standard error, median, and the
    share below the trust threshold."""

    n_items: int
    n_scored: int
    mean: float | None
    stderr: float | None
    median: float | None
    threshold: float
    share_below_threshold: float | None

    @classmethod
    def from_results(cls, results: Mapping[str, Any]) -> GammaSummary:
        agg = results["aggregate"]
        return cls(int(agg["n_items"]), int(agg["n_scored"]), number(agg["mean"]),
                   number(agg["stderr"]), number(agg["median"]), float(agg["threshold"]),
                   number(agg["share_below_threshold"]))


@dataclass(frozen=True)
class GammaResults:
    """A γ run's results.json: the setup, the aggregate over its items, and the null control
    and calibration when the run had them."""

    model: str
    embedder: str
    dataset: str
    domain: str
    """The corpus in comparisons across runs (empty in runs made before it was recorded)."""
    settings: Mapping[str, Any]
    """The run's settings as described (for a recorded run: what the file says)."""
    aggregate: GammaAggregate
    """Counts, mean ± s.e., median, share below the threshold, histogram, truncations."""
    control: ControlSummary | None = None
    calibration: Mapping[str, Any] | None = None

    @property
    def summary(self) -> GammaSummary:
        """The aggregate's headline figures, typed."""
        agg = self.aggregate
        return GammaSummary(agg.n_items, agg.n_scored, agg.mean, agg.stderr, agg.median,
                            agg.threshold, agg.share_below_threshold)

    @classmethod
    def from_json(cls, data: Any) -> GammaResults:
        found = json_object(data, "gamma results")
        return cls(str(found.get("model")), str(found.get("embedder")), str(found.get("dataset")),
                   str(found.get("domain") or ""),
                   json_object(found.get("settings") or {}, "settings"),
                   GammaAggregate.from_json(found["aggregate"]),
                   None if found.get("control") is None
                   else ControlSummary.from_json(found["control"]),
                   found.get("calibration"))

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "method": "gamma", "model": self.model, "embedder": self.embedder,
            "dataset": self.dataset, "domain": self.domain, "settings": self.settings,
            "aggregate": self.aggregate.to_json()}
        if self.control is not None:
            out["control"] = self.control.to_json()
        if self.calibration is not None:
            out["calibration"] = self.calibration
        return out
