"""The Method interface and registry: what a measurement method is made of, by name.

A method is its modules plus one registration naming them: the run function
(``runs/``), the typed per-item record, the files its runs add, the CLI command and the
report sections. Everything that lists methods (run.json validation, ``veracity report``,
the command line) reads this registry; third-party packages add methods through the
``veracity.methods`` entry-point group, each entry point naming a :class:`Method` object.
Targets are ``"module:attribute"`` strings, imported only when used.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Protocol, cast, runtime_checkable

from veracity.errors import UnknownSpecError

_log = logging.getLogger(__name__)


def load_target(target: str) -> Any:
    """The object a ``"module:attribute"`` string names."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class ReportSection:
    """One part of a method's report: a function ``(runs) -> HTML``."""

    target: str
    title: str = ""
    """Sub-heading; empty for the method's main section (headed by the method's title)."""
    model_info: bool = False
    """The function also takes ``info=`` (``veracity report --model-info``)."""

    def load(self) -> Callable[..., str]:
        return cast(Callable[..., str], load_target(self.target))


@runtime_checkable
class Method(Protocol):
    """What the rest of veracity needs to know about a measurement method."""

    @property
    def name(self) -> str:
        """run.json's ``method``; also the CLI command's name."""

    @property
    def title(self) -> str:
        """Heading of its report section."""

    @property
    def higher_is_better(self) -> bool:
        """Direction of its primary metric."""

    @property
    def primary_metric(self) -> str:
        """The per-item field a run is judged by."""

    @property
    def run_files(self) -> tuple[str, ...]:
        """Files its runs write besides run.json, samples.jsonl, results.json, report.html."""

    @property
    def sections(self) -> tuple[ReportSection, ...]:
        """Its report, in order."""

    def runner(self) -> Callable[..., Any]:
        """The run function (context, inputs, ``out``) -> RunResult."""

    def record_type(self) -> type[Any]:
        """The typed per-item record of its samples.jsonl (``from_json`` / ``to_json``)."""

    def command(self) -> Any | None:
        """Its click command (or group); None when its commands join another method's group."""


@dataclass(frozen=True)
class MethodSpec:
    """A method registered by ``module:attribute`` strings (a :class:`Method`)."""

    name: str
    title: str
    run: str
    record: str
    cli: str
    sections: tuple[ReportSection, ...]
    higher_is_better: bool
    primary_metric: str
    run_files: tuple[str, ...] = ()

    def runner(self) -> Callable[..., Any]:
        return cast(Callable[..., Any], load_target(self.run))

    def record_type(self) -> type[Any]:
        return cast(type[Any], load_target(self.record))

    def command(self) -> Any | None:
        return load_target(self.cli) if self.cli else None


_REGISTRY: dict[str, Method] = {}
_plugins_loaded = False


def register_method(method: Method) -> None:
    """Add (or replace) a method."""
    _REGISTRY[method.name] = method


def _section(module: str, *extra: ReportSection) -> tuple[ReportSection, ...]:
    return (ReportSection(f"veracity.report.{module}:section"), *extra)


for _m in (
    MethodSpec("gamma", "Harmonic γ", "veracity.runs.gamma:run_gamma",
               "veracity.records:GammaRecord", "veracity.cli.gamma:gamma", _section("gamma"),
               higher_is_better=False, primary_metric="gamma"),
    MethodSpec("deception", "Deception-based benchmarking", "veracity.runs.deception:run_deception",
               "veracity.records:DeceptionRecord", "veracity.cli.deception:deception",
               _section("deception", ReportSection("veracity.report.deception_compare:section",
                                                   "Comparison across models", model_info=True)),
               higher_is_better=True, primary_metric="misleading_accuracy"),
    MethodSpec("fewl", "FEWL", "veracity.runs.fewl_modes:run_fewl", "veracity.records:FewlRecord",
               "veracity.cli.fewl:fewl", _section("fewl"), higher_is_better=True,
               primary_metric="fewl",
               run_files=("references.jsonl", "pairs.jsonl", "icl_prompts.jsonl", "finetune.jsonl")),
    MethodSpec("attack", "Adversarial γ search", "veracity.runs.attack:run_attack",
               "veracity.records:Row", "veracity.cli.attack:attack", _section("attack"),
               higher_is_better=False, primary_metric="gamma"),
    MethodSpec("isotropy", "Isotropy of the ball", "veracity.runs.isotropy:run_isotropy",
               "veracity.records:Row", "veracity.cli.attack:isotropy", _section("isotropy"),
               higher_is_better=False, primary_metric="answer_angle"),
    # its commands are `veracity fewl icl` and `veracity fewl finetune` (cli/fewl_train.py)
    MethodSpec("mitigation", "Reducing hallucination with FEWL (ICL and fine-tuning)",
               "veracity.runs.fewl_icl:fewl_icl", "veracity.records:Row", "",
               _section("mitigation"), higher_is_better=True, primary_metric="candidate_better",
               run_files=("selection.jsonl",)),
):
    register_method(_m)


def _load_entry_points() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group="veracity.methods"):
        if ep.name in _REGISTRY:
            continue
        try:
            method = ep.load()
        except Exception as exc:  # a broken plugin must not take the built-in methods down
            _log.warning("method plugin %s (%s) not loaded: %s: %s", ep.name, ep.value,
                         type(exc).__name__, exc)
            continue
        if not isinstance(method, Method):
            _log.warning("method plugin %s (%s) is not a veracity Method; not loaded", ep.name,
                         ep.value)
            continue
        _REGISTRY[method.name] = method


def methods() -> list[Method]:
    """Every registered method, built-in ones first, then plugins."""
    _load_entry_points()
    return list(_REGISTRY.values())


def method_names() -> tuple[str, ...]:
    """The names run.json's ``method`` may take."""
    return tuple(m.name for m in methods())


def get_method(name: str) -> Method:
    """The method registered as ``name``."""
    _load_entry_points()
    if name not in _REGISTRY:
        raise UnknownSpecError(f"unknown method '{name}'; known: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]
