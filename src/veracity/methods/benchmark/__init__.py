"""``veracity benchmark``: every method's trust signal on the same answers at an equal call
budget, judged against several label sources (one folder, declared here for the registry).
It reaches the other methods through the registry's ``signal`` targets only."""

from veracity.method import Command, MethodSpec, ReportSection

METHODS = (
    MethodSpec("benchmark", "Benchmark of trust signals",
               "veracity.methods.benchmark.records:BenchmarkRecord",
               (ReportSection("veracity.methods.benchmark.report:section"),),
               higher_is_better=True, primary_metric="scores",
               run_files=("benchmark.json", "benchmark.csv"),
               compare_json="veracity.methods.benchmark.report:compare",
               commands=(Command("veracity.methods.benchmark.cli:benchmark"),)),
)
