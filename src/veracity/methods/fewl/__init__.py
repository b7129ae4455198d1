"""FEWL: answers scored against expertise-weighted reference models, and §5's mitigation
by in-context examples and fine-tuning (one folder, declared here for the registry)."""

from veracity.method import Command, MethodSpec, ReportSection

METHODS = (
    MethodSpec("fewl", "FEWL", "veracity.methods.fewl.records:FewlRecord",
               (ReportSection("veracity.methods.fewl.report:section"),),
               scripts=("veracity.methods.fewl:drill.js",),
               higher_is_better=True, primary_metric="fewl",
               commands=(Command("veracity.methods.fewl.cli:fewl"),),
               run_files=("references.jsonl", "pairs.jsonl", "icl_prompts.jsonl", "finetune.jsonl")),
    MethodSpec("mitigation", "Reducing hallucination with FEWL (ICL and fine-tuning)",
               "veracity.methods.fewl.records:MitigationRecord",
               (ReportSection("veracity.methods.fewl.report_mitigation:section"),),
               higher_is_better=True, primary_metric="candidate_better",
               commands=(Command("veracity.methods.fewl.cli_train:icl_cmd", group="fewl"),
                         Command("veracity.methods.fewl.cli_train:finetune_cmd", group="fewl"),
                         Command("veracity.methods.fewl.cli_annotate:annotate", group="fewl")),
               run_files=("selection.jsonl",)),
)
