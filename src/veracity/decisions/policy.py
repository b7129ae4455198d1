"""A decision policy: what to do with a scored answer — ``answer``, ``abstain`` or ``escalate``.

A policy is a TOML file (``veracity serve --policy FILE``, ``trust(..., policy=FILE)``); every
table and key is optional except ``[decide]``'s threshold (docs/decisions.md)::

    [decide]
    score = "gamma"              # "gamma", "logprob" or "both"
    calibration = "risk.json"    # from veracity calibrate --risk (or: gamma_max = 0.14)
    logprob_min = -0.7           # pass when the answer's mean token log-probability ≥ this
    combine = "all"              # with score = "both": "all" must pass, or "any"
    otherwise = "escalate"       # a failed answer: "abstain" or "escalate"
    unscored = "answer"          # no score (an error, not sampled): "answer", "abstain", "escalate"

    [abstain]
    action = "flag"              # "flag": return it marked; "withhold": replace its text
    message = "I am not sure enough to answer that."

    [escalate]
    upstream = "http://127.0.0.1:9000/v1"   # the gateway's second upstream
    model = "stronger-model"     # the model asked there (the library: a model spec)
    api_key_env = "STRONG_API_KEY"
    otherwise = "abstain"        # the escalated answer fails too: "abstain" or "answer"

    [sampling]
    rate = 0.25                  # share of requests scored (deterministic from the request id)
    [sampling.models]
    "cheap-model" = 0.05
    [sampling.routes]            # by the X-Veracity-Route header a client sends (wins over models)
    "internal-search" = 0.01

Without a policy every answer's decision is ``answer``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import tomllib

from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject

Decision = Literal["answer", "abstain", "escalate"]
DECISIONS: tuple[Decision, ...] = ("answer", "abstain", "escalate")
Score = Literal["gamma", "logprob", "both"]
_TABLES = {"decide": {"score", "calibration", "gamma_max", "logprob_min", "combine", "otherwise",
                      "unscored"},
           "abstain": {"action", "message"},
           "escalate": {"upstream", "model", "api_key_env", "otherwise"},
           "sampling": {"rate", "models", "routes"}}
DEFAULT_MESSAGE = "The answer was withheld: it did not meet this service's reliability policy."


@dataclass(frozen=True)
class Decided:
    """A decision and why, as it appears in the response's ``veracity`` object."""

    decision: Decision
    reason: str


@dataclass(frozen=True)
class Rule:
    """When an answer passes."""

    score: Score = "gamma"
    gamma_max: float | None = None
    """Pass when γ ≤ this."""
    logprob_min: float | None = None
    """Pass when the mean token log-probability ≥ this."""
    combine: Literal["all", "any"] = "all"
    source: str = ""
    """Where gamma_max came from (a risk calibration: its α, δ and coverage)."""
    alpha: float | None = None
    """The error bound among passed answers that calibration certified (None: no bound)."""

    def check(self, gamma: float | None, logprob: float | None) -> tuple[bool | None, str]:
        """(passes, why); passes is None when a score the rule needs is missing."""
        parts: list[tuple[bool | None, str]] = []
        if self.score in ("gamma", "both"):
            assert self.gamma_max is not None
            parts.append(_compare("gamma", gamma, self.gamma_max, below=True))
        if self.score in ("logprob", "both"):
            assert self.logprob_min is not None
            parts.append(_compare("logprob", logprob, self.logprob_min, below=False))
        known = [p for p, _ in parts if p is not None]
        why = "; ".join(w for _, w in parts)
        if self.combine == "any" and any(known):
            return True, why
        if len(known) < len(parts):
            return None, why
        return (all(known) if self.combine == "all" else any(known)), why


def _compare(name: str, value: float | None, bound: float, below: bool) -> tuple[bool | None, str]:
    if value is None or math.isnan(value):
        return None, f"no {name}"
    ok = value <= bound if below else value >= bound
    sign = ("≤" if ok else ">") if below else ("≥" if ok else "<")
    return ok, f"{name} {value:.4g} {sign} {bound:.4g}"


@dataclass(frozen=True)
class Abstention:
    action: Literal["flag", "withhold"] = "flag"
    message: str = DEFAULT_MESSAGE


@dataclass(frozen=True)
class Escalation:
    upstream: str | None = field(default=None, repr=False)
    """The gateway's second OpenAI-compatible server (``http(s)://host:port/v1``)."""
    model: str | None = None
    """The model asked (the gateway: the name sent; the library: a model spec). None: the
    request's own model name."""
    api_key_env: str = "OPENAI_API_KEY"
    otherwise: Literal["abstain", "answer"] = "abstain"


@dataclass(frozen=True)
class Sampling:
    """Which requests are scored: a share per route, per model or overall, chosen from the
    request id."""

    rate: float | None = None
    """None: the gateway's ``--score-rate`` (default 1)."""
    models: Mapping[str, float] = field(default_factory=dict)
    routes: Mapping[str, float] = field(default_factory=dict)
    """By the route a client names in its ``X-Veracity-Route`` header (a product surface, a
    tenant); a route's rate wins over its model's."""

    def rate_for(self, model: str, default: float = 1.0, route: str | None = None) -> float:
        if route is not None and route in self.routes:
            return self.routes[route]
        found = self.models.get(model)
        if found is not None:
            return found
        return default if self.rate is None else self.rate


def sampled(request_id: str, rate: float) -> bool:
    """Whether a request is scored at ``rate``: the same id always gets the same answer
    (a BLAKE2b hash of the id read as a number in [0, 1))."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    digest = hashlib.blake2b(request_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < rate


@dataclass(frozen=True)
class Policy:
    rule: Rule | None = None
    """None: a policy that only samples; every decision is ``answer``."""
    otherwise: Decision = "abstain"
    unscored: Decision = "answer"
    abstain: Abstention = field(default_factory=Abstention)
    escalate: Escalation | None = None
    sampling: Sampling = field(default_factory=Sampling)
    source: str = ""

    def decide(self, gamma: float | None, logprob: float | None = None) -> Decided:
        """The first answer's decision."""
        if self.rule is None:
            return Decided("answer", "no rule in the policy")
        passes, why = self.rule.check(gamma, logprob)
        if passes is None:
            return Decided(self.unscored, f"unscored ({why})")
        if passes:
            return Decided("answer", why)
        return Decided(self.otherwise, why)

    def decide_escalated(self, gamma: float | None, logprob: float | None = None) -> Decided:
        """The escalated answer's decision: ``answer`` or the escalation's ``otherwise``."""
        assert self.escalate is not None
        if self.rule is None:
            return Decided("answer", "no rule in the policy")
        passes, why = self.rule.check(gamma, logprob)
        if passes:
            return Decided("answer", why)
        return Decided(self.escalate.otherwise, f"unscored ({why})" if passes is None else why)

    @property
    def needs_logprobs(self) -> bool:
        return self.rule is not None and self.rule.score in ("logprob", "both")

    def describe(self) -> JsonObject:
        """The policy as recorded in each decision (no key, no upstream credentials)."""
        rule = self.rule
        return {"source": self.source,
                "rule": None if rule is None else {
                    "score": rule.score, "gamma_max": rule.gamma_max,
                    "logprob_min": rule.logprob_min, "combine": rule.combine,
                    "from": rule.source or None},
                "otherwise": self.otherwise, "unscored": self.unscored,
                "abstain": self.abstain.action}


def _get(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str,
         default: Any = None) -> Any:
    value = table.get(key, default)
    if value is default:
        return value
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ConfigError(f"{where}: '{key}' must be {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: '{key}' must be {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "a number", float: "a number", dict: "a table"}
    return " or ".join(sorted({names.get(k, k.__name__) for k in kinds}))


def _choice(table: Mapping[str, Any], key: str, allowed: tuple[str, ...], where: str,
            default: str) -> str:
    value = _get(table, key, str, where, default)
    if value not in allowed:
        raise ConfigError(f"{where}: '{key}' must be one of {', '.join(allowed)}; got '{value}'")
    return str(value)


def _rate(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{where}: a sampling rate must be a number from 0 to 1, got {value!r}")
    return float(value)


def risk_gamma_max(path: Path, where: str) -> tuple[float | None, str, float]:
    """The γ threshold of a ``veracity calibrate --risk`` file, a description of it, its α."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read calibration {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: calibration {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != "veracity-risk-threshold":
        raise ConfigError(f"{where}: {path} is not a file from 'veracity calibrate --risk'")
    if data.get("method") != "gamma" or data.get("higher_is_better") is not False:
        raise ConfigError(f"{where}: {path} certifies a threshold on {data.get('method')}'s "
                          f"{data.get('score')}, not on γ")
    threshold = data.get("threshold")
    info = (f"{path} (α={data.get('alpha')}, δ={data.get('delta')}, n={data.get('n')}, "
            f"coverage {float(data.get('coverage') or 0):.3f})")
    return (None if threshold is None else float(threshold)), info, float(data["alpha"])


def parse_policy(data: Mapping[str, Any], source: str = "", base: Path | None = None) -> Policy:
    """A policy from its parsed TOML (``base``: the folder relative paths start from)."""
    for name, value in data.items():
        if name not in _TABLES:
            raise ConfigError(f"{source}: unknown table [{name}]; known: {', '.join(_TABLES)}")
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: [{name}] must be a table")
        unknown = set(value) - _TABLES[name]
        if unknown:
            raise ConfigError(f"{source}: [{name}] has unknown keys {', '.join(sorted(unknown))}; "
                              f"known: {', '.join(sorted(_TABLES[name]))}")
    decide = data.get("decide", {})
    where = f"{source} [decide]"
    rule = None
    otherwise = cast(Decision, _choice(decide, "otherwise", ("abstain", "escalate"), where, "abstain"))
    unscored = cast(Decision, _choice(decide, "unscored", DECISIONS, where, "answer"))
    if decide:
        score = cast(Score, _choice(decide, "score", ("gamma", "logprob", "both"), where, "gamma"))
        gamma_max = _get(decide, "gamma_max", (int, float), where)
        calibration = _get(decide, "calibration", str, where)
        logprob_min = _get(decide, "logprob_min", (int, float), where)
        origin = ""
        alpha = None
        if score in ("gamma", "both"):
            if (gamma_max is None) == (calibration is None):
                raise ConfigError(f"{where}: give one of gamma_max (a γ threshold) or calibration "
                                  "(a file from veracity calibrate --risk)")
            if calibration is not None:
                file = Path(calibration)
                if base is not None and not file.is_absolute():
                    file = base / file
                gamma_max, origin, alpha = risk_gamma_max(file, where)
                if gamma_max is None:
                    gamma_max = -math.inf  # the calibration certified nothing: nothing passes
                    origin += ": no threshold certified, nothing passes"
            elif gamma_max < 0:
                raise ConfigError(f"{where}: gamma_max must not be negative, got {gamma_max}")
        elif gamma_max is not None or calibration is not None:
            raise ConfigError(f"{where}: score = \"logprob\" uses logprob_min only")
        if score in ("logprob", "both"):
            if logprob_min is None:
                raise ConfigError(f"{where}: score = \"{score}\" needs logprob_min (a mean token "
                                  "log-probability, e.g. -0.7)")
            if logprob_min > 0:
                raise ConfigError(f"{where}: logprob_min is a log-probability (≤ 0), got {logprob_min}")
        combine = _choice(decide, "combine", ("all", "any"), where, "all")
        rule = Rule(score, None if gamma_max is None else float(gamma_max),
                    None if logprob_min is None else float(logprob_min),
                    cast(Literal["all", "any"], combine), origin,
                    alpha if score == "gamma" else None)
    abstain_table = data.get("abstain", {})
    abstain = Abstention(
        cast(Literal["flag", "withhold"], _choice(abstain_table, "action", ("flag", "withhold"),
                                                  f"{source} [abstain]", "flag")),
        _get(abstain_table, "message", str, f"{source} [abstain]", DEFAULT_MESSAGE))
    escalate = None
    if "escalate" in data:
        table, where = data["escalate"], f"{source} [escalate]"
        upstream = _get(table, "upstream", str, where)
        if upstream is not None and not upstream.startswith(("http://", "https://")):
            raise ConfigError(f"{where}: upstream must start with http:// or https://")
        escalate = Escalation(upstream, _get(table, "model", str, where),
                              _get(table, "api_key_env", str, where, "OPENAI_API_KEY"),
                              cast(Literal["abstain", "answer"],
                                   _choice(table, "otherwise", ("abstain", "answer"), where,
                                           "abstain")))
    if escalate is None and "escalate" in (otherwise, unscored):
        raise ConfigError(f"{source}: the policy escalates but has no [escalate] table naming "
                          "where to")
    table = data.get("sampling", {})
    models = _get(table, "models", dict, f"{source} [sampling]", {})
    routes = _get(table, "routes", dict, f"{source} [sampling]", {})
    sampling = Sampling(
        None if "rate" not in table else _rate(table["rate"], f"{source} [sampling]"),
        {str(k): _rate(v, f"{source} [sampling.models] '{k}'") for k, v in models.items()},
        {str(k): _rate(v, f"{source} [sampling.routes] '{k}'") for k, v in routes.items()})
    return Policy(rule, otherwise, unscored, abstain, escalate, sampling, source)


def read_policy(path: Path | str) -> Policy:
    """A policy file (TOML); a ConfigError naming the file and the problem."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read policy {file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"policy {file} is not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"policy {file} is not valid TOML: {exc}") from None
    return parse_policy(data, str(file), file.parent)


def as_policy(policy: Policy | Path | str | None) -> Policy | None:
    if policy is None or isinstance(policy, Policy):
        return policy
    return read_policy(policy)
