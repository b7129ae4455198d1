"""Deception-based benchmarking (DB-MMLU): each question answered normally and from a
misleading opening (one folder, declared here for the registry)."""

from veracity.method import Command, MethodSpec, ReportSection

METHODS = (
    MethodSpec("deception", "Deception-based benchmarking",
               "veracity.methods.deception.records:DeceptionRecord",
               (ReportSection("veracity.methods.deception.report:section"),
                ReportSection("veracity.methods.deception.report_compare:section",
                              "Comparison across models", model_info=True)),
               scripts=("veracity.methods.deception:drill.js",),
               higher_is_better=True, primary_metric="misleading_accuracy",
               commands=(Command("veracity.methods.deception.cli:deception"),)),
)
