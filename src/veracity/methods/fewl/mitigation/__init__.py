"""Reducing hallucination with FEWL (paper §5): FEWL-chosen answers as in-context examples
or fine-tuning targets, judged head to head (declared here for the registry; its human
judges are in the ``annotation`` sub-folder)."""

from veracity.method import Command, FakeMode, MethodSpec, ReportSection
from veracity.methods.fewl.mitigation import annotation

_CLI = "veracity.methods.fewl.mitigation.cli"

METHODS = (
    MethodSpec("mitigation", "Reducing hallucination with FEWL (ICL and fine-tuning)",
               "veracity.methods.fewl.mitigation.records:MitigationRecord",
               (ReportSection("veracity.methods.fewl.mitigation.report:section"),),
               higher_is_better=True, primary_metric="candidate_better",
               commands=(Command(f"{_CLI}:icl_cmd", group="fewl"),
                         Command(f"{_CLI}:finetune_cmd", group="fewl")),
               run_files=("selection.jsonl",),
               fake_modes=(FakeMode("judge", "veracity.methods.fewl.mitigation.judge:fake_judge"),
                           FakeMode("context",
                                    "veracity.methods.fewl.mitigation.examples:fake_context")))
    .with_parts(annotation.PART),
)
