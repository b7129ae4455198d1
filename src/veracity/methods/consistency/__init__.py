"""Self-consistency baseline: M answers sampled at T > 0 scored by their agreement with the
greedy answer (one folder, declared here for the registry)."""

from veracity.method import Command, MethodSpec, ReportSection

METHODS = (
    MethodSpec("consistency", "Self-consistency baseline",
               "veracity.methods.consistency.records:ConsistencyRecord",
               (ReportSection("veracity.methods.consistency.report:section"),
                ReportSection("veracity.methods.consistency.report:validation_section",
                              "Validation against labels", file="validation.json")),
               scripts=("veracity.methods.consistency:drill.js",),
               higher_is_better=True, primary_metric="score",
               api=("veracity.methods.consistency.api:consistency",),
               signal="veracity.methods.consistency.signal:signal",
               commands=(Command("veracity.methods.consistency.cli:consistency"),
                         Command("veracity.methods.consistency.cli:validate_command",
                                 group="validate"))),
)
