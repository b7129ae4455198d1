"""Harmonic γ: the measurement, its adversarial search, the ball's isotropy, calibration,
the live trust score and the rating sheets (one folder, declared here for the registry)."""

from veracity.method import Command, MethodSpec, ReportSection

_SECTION = "veracity.methods.gamma.{}:section"

METHODS = (
    MethodSpec("gamma", "Harmonic γ", "veracity.methods.gamma.records:GammaRecord",
               (ReportSection(_SECTION.format("report")),
                ReportSection(_SECTION.format("report_validate"), "Validation against labels",
                              file="validation.json"),
                ReportSection("veracity.methods.gamma.report_validate:ratings_section",
                              "Human ratings", file="ratings.json")),
               scripts=("veracity.methods.gamma:drill.js",),
               higher_is_better=False, primary_metric="gamma",
               compare_json="veracity.methods.gamma.report_table:table8",
               signal="veracity.methods.gamma.signal:signal",
               commands=(Command("veracity.methods.gamma.cli:gamma"),
                         Command("veracity.methods.gamma.cli_calibrate:calibrate_command"),
                         Command("veracity.methods.gamma.cli_validate:validate"),
                         Command("veracity.methods.gamma.cli_validate:annotate"))),
    MethodSpec("attack", "Adversarial γ search", "veracity.methods.gamma.records:AttackStep",
               (ReportSection(_SECTION.format("report_attack")),),
               higher_is_better=False, primary_metric="gamma",
               commands=(Command("veracity.methods.gamma.cli_attack:attack"),)),
    MethodSpec("isotropy", "Isotropy of the ball", "veracity.methods.gamma.records:IsotropyRecord",
               (ReportSection(_SECTION.format("report_isotropy")),),
               higher_is_better=False, primary_metric="answer_angle",
               commands=(Command("veracity.methods.gamma.cli_attack:isotropy"),)),
)
