"""Deception-based benchmarking (DB-MMLU): each question answered normally and from a
misleading opening (one folder, declared here for the registry; the comparison across
models is the ``compare`` sub-folder)."""

from veracity.method import Command, FakeMode, MethodSpec, ReportSection
from veracity.methods.deception import compare

METHODS = (
    MethodSpec("deception", "Deception-based benchmarking",
               "veracity.methods.deception.records:DeceptionRecord",
               (ReportSection("veracity.methods.deception.report:section"),),
               scripts=("veracity.methods.deception:drill.js",),
               higher_is_better=True, primary_metric="misleading_accuracy",
               api=("veracity.methods.deception.api:deception",
                    "veracity.methods.deception.api:score_deception"),
               commands=(Command("veracity.methods.deception.cli:deception"),),
               fake_modes=(FakeMode("deceive", "veracity.methods.deception.core:fake_deceive"),
                           FakeMode("deceive-flaky",
                                    "veracity.methods.deception.core:fake_deceive_flaky"),
                           FakeMode("misleader",
                                    "veracity.methods.deception.dataset:fake_misleader")))
    .with_parts(compare.PART),
)
