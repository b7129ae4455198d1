"""The Method interface and registry: what a measurement method is made of, by name.

A method is a folder under ``veracity/methods/`` plus one line in :data:`BUILTIN` naming the
specs its ``__init__`` declares: the typed per-item record, the files its runs add, its CLI
commands, report sections, scripts and public names. Everything that lists methods (run.json
validation, ``veracity report``, the command line) reads this registry; third-party packages
add methods through the ``veracity.methods`` entry-point group, each entry point naming a
:class:`Method` object.
Targets are ``"module:attribute"`` strings, imported only when used.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from veracity.errors import UnknownSpecError, VeracityError
from veracity.types import Generation, Item, Sampling

if TYPE_CHECKING:
    from veracity.runs.common import Context

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
    file: str = ""
    """Shown only for the method's runs that hold this file (one a later command adds, e.g.
    validation.json), under its own heading; empty = part of the method's section."""

    def load(self) -> Callable[..., str]:
        return cast(Callable[..., str], load_target(self.target))


@dataclass(frozen=True)
class FakeMode:
    """A scripted ``fake/<name>`` model a method brings for its tests and examples: a function
    ``(GenRequest) -> str`` answering the prompts the method writes."""

    name: str
    target: str

    def load(self) -> Callable[[Any], str]:
        return cast(Callable[[Any], str], load_target(self.target))


@dataclass(frozen=True)
class Command:
    """A click command (or group) a method adds to the command line."""

    target: str
    group: str = ""
    """The command group it joins (another method's, e.g. ``fewl``); empty = ``veracity``."""

    def load(self) -> Any:
        return load_target(self.target)


@runtime_checkable
class Method(Protocol):
    """What the rest of veracity needs to know about a measurement method."""

    @property
    def name(self) -> str:
        """run.json's ``method``."""

    @property
    def title(self) -> str:
        """Heading of its report section."""

    @property
    def higher_is_better(self) -> bool:
        """Direction of its primary metric (written to run.json)."""

    @property
    def primary_metric(self) -> str:
        """The per-item field a run is judged by (written to run.json)."""

    @property
    def run_files(self) -> tuple[str, ...]:
        """Files its runs write besides run.json, samples.jsonl, results.json, report.html."""

    @property
    def sections(self) -> tuple[ReportSection, ...]:
        """Its report, in order."""

    @property
    def commands(self) -> tuple[Command, ...]:
        """Its command-line commands."""

    @property
    def api(self) -> tuple[str, ...]:
        """``module:function`` targets it adds to the public API (``veracity.NAME``)."""

    @property
    def scripts(self) -> tuple[str, ...]:
        """``package:file`` scripts its report sections need (drill-down views)."""

    @property
    def compare_json(self) -> str:
        """``module:function`` giving ``veracity report --json`` for its runs; empty = none."""

    def record_type(self) -> type[Any]:
        """The typed per-item record of its samples.jsonl (``from_json`` / ``to_json``)."""


@dataclass(frozen=True)
class SignalRequest:
    """What ``veracity benchmark`` hands every method: the same questions, the same greedy
    answers, and the model calls each question may cost."""

    items: tuple[Item, ...]
    answers: tuple[Generation | None, ...]
    """The shared greedy answer of each item (None: the model failed on it; leave it unscored)."""
    budget: int
    """K model calls per question, the shared greedy answer included: a method may spend
    K - 1 more per question (the benchmark counts them at the client and refuses overspending)."""
    model: str | None
    """Model spec to call; None when scoring a recorded file (no model call allowed)."""
    embedder: str
    sampling: Sampling
    """How the greedy answers were decoded (temperature 0, max tokens)."""
    temperature: float = 0.7
    """Temperature of methods that sample answers."""
    seed: int = 0
    samples: tuple[tuple[str, ...], ...] | None = None
    """Recorded answers sampled at ``temperature`` per item (score-only runs), else None."""
    entailment: str | None = None
    """Spec of the model that decides whether two answers mean the same (semantic entropy)."""
    references: tuple[str, ...] = ()
    """Reference model specs (FEWL); empty when the user gave none."""


@dataclass(frozen=True)
class Signal:
    """One per-item score a method gives the benchmark (a method may give several, e.g.
    logprob's mean log-probability and minimum token probability)."""

    name: str
    """Row of the leaderboard, e.g. ``gamma`` or ``logprob.mean``."""
    values: tuple[float | None, ...]
    """One value per item; None = not scored (that item is left out of every table)."""
    higher_is_better: bool
    """True when a larger value means a more trustworthy answer (the benchmark negates it)."""
    baseline: bool
    """One of the field's baselines (differences are taken to the best of them)."""
    settings: dict[str, Any] = field(default_factory=dict, hash=False)
    """How it was measured (e.g. ``{"n": 10}``), recorded with the run."""


class SignalUnavailable(VeracityError):
    """A method cannot score this request (no log-probabilities, budget too small, no model for
    a recorded file); the benchmark leaves it out and says why."""


class SignalFunction(Protocol):
    """``veracity benchmark``'s way into a method (its spec's ``signal`` target)."""

    def __call__(self, ctx: Context, request: SignalRequest) -> list[Signal]: ...


@dataclass(frozen=True)
class MethodSpec:
    """A method registered by ``module:attribute`` strings (a :class:`Method`)."""

    name: str
    title: str
    record: str
    sections: tuple[ReportSection, ...]
    higher_is_better: bool
    primary_metric: str
    commands: tuple[Command, ...] = ()
    run_files: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()
    compare_json: str = ""
    api: tuple[str, ...] = ()
    fake_modes: tuple[FakeMode, ...] = ()
    """Scripted ``fake/<name>`` models answering its prompts (listed by ``veracity models``)."""
    signal: str = ""
    """``module:function`` (a :class:`SignalFunction`) through which ``veracity benchmark``
    scores items with this method; empty = not benchmarked."""

    def record_type(self) -> type[Any]:
        return cast(type[Any], load_target(self.record))

    def with_parts(self, *parts: Part) -> MethodSpec:
        """This method with what its sub-folders add (their commands, sections, scripts, ...)."""
        return replace(
            self,
            sections=self.sections + tuple(s for p in parts for s in p.sections),
            commands=self.commands + tuple(c for p in parts for c in p.commands),
            run_files=self.run_files + tuple(f for p in parts for f in p.run_files),
            scripts=self.scripts + tuple(s for p in parts for s in p.scripts),
            api=self.api + tuple(a for p in parts for a in p.api),
            fake_modes=self.fake_modes + tuple(f for p in parts for f in p.fake_modes),
        )


@dataclass(frozen=True)
class Part:
    """A sub-folder of a method folder that is not a method of its own (γ's calibration and
    validation, FEWL's annotation): what it adds to the method it belongs to, declared in its
    ``__init__`` as ``PART`` and joined by :meth:`MethodSpec.with_parts`."""

    sections: tuple[ReportSection, ...] = ()
    commands: tuple[Command, ...] = ()
    run_files: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()
    api: tuple[str, ...] = ()
    fake_modes: tuple[FakeMode, ...] = ()


def signal_function(method: Method) -> SignalFunction | None:
    """The method's benchmark entry point, if it declares one."""
    target = getattr(method, "signal", "")
    return cast(SignalFunction, load_target(target)) if target else None


_REGISTRY: dict[str, Method] = {}
_loaded = False

BUILTIN = (
    "veracity.methods.gamma:METHODS",
    "veracity.methods.deception:METHODS",
    "veracity.methods.fewl:METHODS",
    "veracity.methods.consistency:METHODS",
    "veracity.methods.logprob:METHODS",
    "veracity.methods.length:METHODS",
    "veracity.methods.semantic_entropy:METHODS",
    "veracity.methods.p_true:METHODS",
    "veracity.methods.benchmark:METHODS",
)
"""Where the built-in method folders declare their methods: one line registers a folder."""


def register_method(method: Method) -> None:
    """Add (or replace) a method."""
    _REGISTRY[method.name] = method


def _load() -> None:
    """The built-in methods, then plugins (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for target in BUILTIN:
        for method in load_target(target):
            _REGISTRY.setdefault(method.name, method)
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
    _load()
    return list(_REGISTRY.values())


def public_api(name: str) -> str | None:
    """The target a method adds to the public API as ``veracity.<name>``, if one does."""
    for method in methods():
        for target in method.api:
            if target.rpartition(":")[2] == name:
                return target
    return None


def method_names() -> tuple[str, ...]:
    """The names run.json's ``method`` may take."""
    return tuple(m.name for m in methods())


def get_method(name: str) -> Method:
    """The method registered as ``name``."""
    _load()
    if name not in _REGISTRY:
        raise UnknownSpecError(f"unknown method '{name}'; known: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def fake_modes() -> dict[str, FakeMode]:
    """The scripted ``fake/<name>`` models the registered methods bring, by name."""
    return {f.name: f for m in methods() for f in getattr(m, "fake_modes", ())}
