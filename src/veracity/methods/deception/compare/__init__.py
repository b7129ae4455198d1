"""Deception runs of several models side by side: the accuracy table, its intervals and
paired tests, and Appendix D's cases (part of the deception method)."""

from veracity.method import Part, ReportSection

PART = Part(
    sections=(ReportSection("veracity.methods.deception.compare.report:section",
                            "Comparison across models", model_info=True),),
    scripts=("veracity.methods.deception.compare:drill.js",),
)
