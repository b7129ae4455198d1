"""P(True) baseline (Kadavath et al. 2022): the model's own probability that its answer is
true (one folder, declared here for the registry)."""

from veracity.method import Command, MethodSpec, ReportSection

METHODS = (
    MethodSpec("p-true", "P(True) baseline",
               "veracity.methods.p_true.records:PTrueRecord",
               (ReportSection("veracity.methods.p_true.report:section"),),
               scripts=("veracity.methods.p_true:drill.js",),
               higher_is_better=True, primary_metric="score",
               api=("veracity.methods.p_true.api:p_true",),
               commands=(Command("veracity.methods.p_true.cli:p_true"),)),
)
