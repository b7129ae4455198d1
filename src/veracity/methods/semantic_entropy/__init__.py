"""Semantic-entropy baseline (Kuhn et al. 2023; Farquhar et al. 2024): M sampled answers
clustered by meaning, entropy over the clusters (one folder, declared here for the registry)."""

from veracity.method import Command, MethodSpec, ReportSection

METHODS = (
    MethodSpec("semantic-entropy", "Semantic-entropy baseline",
               "veracity.methods.semantic_entropy.records:SemanticEntropyRecord",
               (ReportSection("veracity.methods.semantic_entropy.report:section"),),
               scripts=("veracity.methods.semantic_entropy:drill.js",),
               higher_is_better=False, primary_metric="score",
               api=("veracity.methods.semantic_entropy.api:semantic_entropy",),
               commands=(Command("veracity.methods.semantic_entropy.cli:semantic_entropy"),)),
)
