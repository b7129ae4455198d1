"""Adversarial γ search (paper §5): from one prompt, walk to the largest γ (declared here for
the registry; the run's records are :class:`~veracity.methods.gamma.attack.records.AttackStep`)."""

from veracity.method import Command, FakeMode, MethodSpec, ReportSection

METHODS = (
    MethodSpec("attack", "Adversarial γ search",
               "veracity.methods.gamma.attack.records:AttackStep",
               (ReportSection("veracity.methods.gamma.attack.report:section"),),
               higher_is_better=False, primary_metric="gamma",
               commands=(Command("veracity.methods.gamma.attack.cli:attack"),),
               fake_modes=(FakeMode("slope", "veracity.methods.gamma.attack.core:fake_slope"),)),
)
