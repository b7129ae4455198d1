"""FEWL: answers scored against expertise-weighted reference models (here), its validation
and §5's mitigation by in-context examples and fine-tuning in sub-folders (declared here for
the registry)."""

from veracity.method import Command, FakeMode, MethodSpec, ReportSection
from veracity.methods.fewl import mitigation, neighbours, selection, validation

METHODS = (
    MethodSpec("fewl", "FEWL", "veracity.methods.fewl.records:FewlRecord",
               (ReportSection("veracity.methods.fewl.report:section"),),
               scripts=("veracity.methods.fewl:drill.js",),
               higher_is_better=True, primary_metric="fewl",
               api=("veracity.methods.fewl.api:fewl", "veracity.methods.fewl.api:score_fewl"),
               commands=(Command("veracity.methods.fewl.cli:fewl"),),
               fake_modes=(FakeMode("pairs", "veracity.methods.fewl.pairs:fake_pairs"),),
               signal="veracity.methods.fewl.modes:benchmark_signal",
               run_files=("references.jsonl", "pairs.jsonl", "icl_prompts.jsonl", "finetune.jsonl"))
    .with_parts(validation.PART, selection.PART, neighbours.PART),
    *mitigation.METHODS,
)
