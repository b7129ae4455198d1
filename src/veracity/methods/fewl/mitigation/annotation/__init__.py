"""Human judges for FEWL's mitigation runs: blind pairwise rating sheets out, raters' choices
and their agreement back in (part of the mitigation method: ``veracity fewl annotate``)."""

from veracity.method import Command, Part

PART = Part(commands=(Command("veracity.methods.fewl.mitigation.annotation.cli:annotate",
                              group="fewl"),))
