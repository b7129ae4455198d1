"""Validation of γ against labels and human ratings (rating sheets out and back in), and the
paper's Table 8 across runs (part of the γ method)."""

from veracity.method import Command, Part, ReportSection

_REPORT = "veracity.methods.gamma.validation.report"

PART = Part(
    sections=(ReportSection(f"{_REPORT}:section", "Validation against labels",
                            file="validation.json"),
              ReportSection(f"{_REPORT}:ratings_section", "Human ratings", file="ratings.json")),
    commands=(Command("veracity.methods.gamma.validation.cli:validate"),
              Command("veracity.methods.gamma.validation.cli:annotate")),
)
