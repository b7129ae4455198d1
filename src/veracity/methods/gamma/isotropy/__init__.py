"""Isotropy of γ's ball: the angles between originals and perturbed answers and prompts
(declared here for the registry)."""

from veracity.method import Command, MethodSpec, ReportSection

METHODS = (
    MethodSpec("isotropy", "Isotropy of the ball",
               "veracity.methods.gamma.isotropy.records:IsotropyRecord",
               (ReportSection("veracity.methods.gamma.isotropy.report:section"),),
               higher_is_better=False, primary_metric="answer_angle",
               commands=(Command("veracity.methods.gamma.isotropy.cli:isotropy"),)),
)
