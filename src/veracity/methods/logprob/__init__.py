"""Log-probability baseline: mean token log-probability, minimum token probability, mean
top-k entropy and perplexity of the greedy answer, from its own call (one folder, declared
here for the registry)."""

from veracity.method import Command, MethodSpec, ReportSection

METHODS = (
    MethodSpec("logprob", "Log-probability baseline",
               "veracity.methods.logprob.records:LogprobRecord",
               (ReportSection("veracity.methods.logprob.report:section"),),
               scripts=("veracity.methods.logprob:drill.js",),
               higher_is_better=True, primary_metric="score",
               api=("veracity.methods.logprob.api:logprob",),
               commands=(Command("veracity.methods.logprob.cli:logprob"),)),
)
