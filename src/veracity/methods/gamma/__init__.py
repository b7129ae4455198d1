"""Harmonic γ: the measurement, the live trust score and the balls (here), with its
adversarial search, the ball's isotropy, calibration, validation and the white-box ball in
sub-folders (each
declares its own part; this module joins them for the registry)."""

from veracity.method import Command, FakeMode, MethodSpec, ReportSection
from veracity.methods.gamma import attack, calibration, isotropy, validation, whitebox

METHODS = (
    MethodSpec("gamma", "Harmonic γ", "veracity.methods.gamma.records:GammaRecord",
               (ReportSection("veracity.methods.gamma.report:section"),),
               scripts=("veracity.methods.gamma:drill.js",),
               higher_is_better=False, primary_metric="gamma",
               compare_json="veracity.methods.gamma.validation.table:table8_json",
               signal="veracity.methods.gamma.signal:signal",
               api=("veracity.methods.gamma.api:gamma", "veracity.methods.gamma.api:score_gamma",
                    "veracity.methods.gamma.api:trust", "veracity.methods.gamma.api:Truster"),
               commands=(Command("veracity.methods.gamma.cli:gamma"),),
               fake_modes=(FakeMode("paraphraser",
                                    "veracity.methods.gamma.paraphrase:fake_paraphraser"),))
    .with_parts(calibration.PART, validation.PART, whitebox.PART),
    *attack.METHODS,
    *isotropy.METHODS,
)
