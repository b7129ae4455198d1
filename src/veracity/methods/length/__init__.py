"""Length baseline: the greedy answer's length in tokens, the signal that shows when labels
favour short answers (one folder, declared here for the registry)."""

from veracity.method import Command, MethodSpec, ReportSection

METHODS = (
    MethodSpec("length", "Answer-length baseline",
               "veracity.methods.length.records:LengthRecord",
               (ReportSection("veracity.methods.length.report:section"),),
               scripts=("veracity.methods.length:drill.js",),
               higher_is_better=False, primary_metric="score",
               api=("veracity.methods.length.api:length",),
               commands=(Command("veracity.methods.length.cli:length"),)),
)
