"""Where a score's verdict thresholds (and P(correct)) come from.

A :class:`ThresholdSource` answers "which (low, high) apply to this model, embedder and gamma
form?": :class:`FixedThresholds` (``--thresholds low,high`` or the authors' buckets) or
:class:`CalibratedThresholds` (``--calibration FILE``: the thresholds and the gamma -> P(correct)
curve fitted for that model, embedder, form, ball and N by ``veracity calibrate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.calibration.core import KEY_FIELDS, Calibration, Curve, describe_key
from veracity.methods.gamma.calibration.trust import (
    AUTHORS_SOURCE,
    Verdict,
    check_thresholds,
    default_thresholds,
    verdict,
)
from veracity.methods.gamma.core import Form


@dataclass(frozen=True)
class Thresholds:
    """(low, high) and where they came from; recorded in every score."""

    low: float
    high: float
    source: str
    curve: Curve | None = None
    """The calibration curve giving P(correct), when the thresholds come from one."""
    calibration: dict[str, Any] | None = None
    """Which calibration (file, key, whether forced and what differs); recorded in each score."""

    def verdict(self, gamma: float | None) -> Verdict:
        return verdict(gamma, (self.low, self.high))

    def to_dict(self) -> JsonObject:
        return {"low": self.low, "high": self.high, "source": self.source}


class ThresholdSource(Protocol):
    """Thresholds for one (model, embedder, form); a ConfigError when there are none."""

    def lookup(self, model: str, embedder: str, form: Form) -> Thresholds: ...


class FixedThresholds:
    """The same thresholds for every model: given ones, or the authors' 0.1 / 0.2 buckets."""

    def __init__(self, thresholds: tuple[float, float] | None = None) -> None:
        self._given = None if thresholds is None else check_thresholds(thresholds)

    def lookup(self, model: str, embedder: str, form: Form) -> Thresholds:
        if self._given is not None:
            return Thresholds(*self._given, source="--thresholds")
        low, high = default_thresholds(form)
        return Thresholds(low, high, source=AUTHORS_SOURCE)


class CalibratedThresholds:
    """Thresholds and P(correct) from a calibration file, per (model, embedder, form, ball, N).

    A calibration made for another setup is refused (a ConfigError naming both sides) unless
    ``force``; a forced one is recorded as such in every score.
    """

    def __init__(self, calibration: Calibration, ball: str, n: int, force: bool = False) -> None:
        self.calibration = calibration
        self.ball = ball
        self.n = n
        self.force = force
        self._found: dict[tuple[str, str, str], Thresholds] = {}

    def lookup(self, model: str, embedder: str, form: Form) -> Thresholds:
        name = (model, embedder, form)
        if name not in self._found:
            key = {"model": model, "embedder": embedder, "form": form, "ball": self.ball, "n": self.n}
            curve, info = self.calibration.select(key, self.force)
            low, high = curve.verdict_thresholds()
            forced = " (forced: made for another setup)" if info["forced"] else ""
            source = f"calibration {self.calibration.source}{forced}".replace("  ", " ")
            if len(self._found) >= 1024:  # model names come from clients
                self._found.clear()
            self._found[name] = Thresholds(low, high, source, curve, info)
        return self._found[name]

    def check(self, embedder: str, form: Form, model: str | None = None) -> None:
        """At startup: refuse a calibration that fits no request this gateway can score.

        With ``model`` (an in-process model) the whole key must match; without (an upstream
        serving any model) at least one curve must be for this embedder, form, ball and N.
        """
        if model is not None:
            self.lookup(model, embedder, form)
            return
        here = {"embedder": embedder, "form": form, "ball": self.ball, "n": self.n}
        if self.force or any(all(c.key.get(f) == v for f, v in here.items())
                             for c in self.calibration.curves):
            return
        made = "; ".join(describe_key(c.key) for c in self.calibration.curves)
        wanted = ", ".join(f"{f}={here[f]}" for f in KEY_FIELDS if f in here)
        raise ConfigError(
            f"calibration {self.calibration.source} was made for {made}, not for {wanted}: fit one "
            "on labelled runs of this setup (veracity calibrate), or pass --force to use it anyway "
            "(recorded in every score)"
        )
