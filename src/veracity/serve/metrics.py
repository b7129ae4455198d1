"""Prometheus metrics of one gateway, in a registry the app owns (several apps, several registries)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TOKENS = (50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)
_GAMMA = (0.01, 0.025, 0.05, 0.1, 0.141, 0.2, 0.28, 0.4, 0.6, 0.8, 1.0, 1.42)
MAX_MODEL_LABELS = 32
"""Model names come from clients: past this many distinct ones they are counted as 'other'."""


class GatewayMetrics:
    """Requests, latencies, gamma and verdicts per model, queue depth, upstream and client errors."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("veracity_gateway_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.upstream_seconds = Histogram("veracity_gateway_upstream_seconds",
                                          "Latency of the upstream call that produced the answer",
                                          ["model"], buckets=_LATENCY, registry=r)
        self.scoring_seconds = Histogram("veracity_gateway_scoring_seconds",
                                         "Latency of one score (perturbed calls + embedding + gamma)",
                                         ["model"], buckets=_LATENCY, registry=r)
        self.gamma = Histogram("veracity_gateway_gamma", "Gamma of scored answers", ["model"],
                               buckets=_GAMMA, registry=r)
        self.verdicts = Counter("veracity_gateway_verdicts", "Verdicts of scored answers",
                                ["model", "verdict"], registry=r)
        self.queue_depth = Gauge("veracity_gateway_queue_depth", "Requests or scores waiting",
                                 ["queue"], registry=r)
        self.in_flight = Gauge("veracity_gateway_in_flight", "Requests being handled", registry=r)
        self.upstream_errors = Counter("veracity_gateway_upstream_errors",
                                       "Upstream failures by kind (HTTP status, timeout, connection)",
                                       ["kind"], registry=r)
        self.scoring_errors = Counter("veracity_gateway_scoring_errors",
                                      "Answers returned without a score, by model and why (the "
                                      "score's error_kind)", ["model", "kind"], registry=r)
        self.client_errors = Counter("veracity_gateway_client_errors",
                                     "Clients refused or gone before their request was read "
                                     "(disconnect, too_large, body_timeout, header_timeout, "
                                     "connection_cap)", ["kind"], registry=r)
        self.decisions = Counter("veracity_gateway_decisions",
                                 "Decisions on scored answers (answer, abstain, escalate), by model "
                                 "and stage (first answer, or the escalated one)",
                                 ["model", "decision", "stage"], registry=r)
        self.unscored = Counter("veracity_gateway_unscored",
                                "Answers passed through unscored (left out by --score-rate or the "
                                "policy's sampling)", ["model"], registry=r)
        self.feedback = Counter("veracity_gateway_feedback",
                                "Labels fed back (POST /v1/veracity/feedback), by model, the "
                                "answer's decision and whether it was correct",
                                ["model", "decision", "correct"], registry=r)
        self.observed_error = Gauge("veracity_gateway_observed_error",
                                    "Share of wrong answers among passed (decision answer) ones "
                                    "with a label fed back, by model", ["model"], registry=r)
        self.error_bound = Gauge("veracity_gateway_error_bound",
                                 "The error rate among passed answers the policy's risk "
                                 "calibration certifies (alpha); absent without one", registry=r)
        self.scoring_tokens = Histogram("veracity_gateway_scoring_tokens",
                                        "Tokens (prompt + completion) the perturbed calls of one "
                                        "scored answer sent upstream", ["model"], buckets=_TOKENS,
                                        registry=r)
        self.scoring_cost = Counter("veracity_gateway_scoring_cost_usd",
                                    "USD spent on scoring (perturbed calls' tokens at --prices)",
                                    ["model"], registry=r)
        self._models: set[str] = set()

    def model_label(self, model: str) -> str:
        """The label for a client-supplied model name, bounded in number and length."""
        label = model[:100]
        if label in self._models:
            return label
        if len(self._models) >= MAX_MODEL_LABELS:
            return "other"
        self._models.add(label)
        return label

    def observe_feedback(self, counts: list[tuple[str, str, int, int]]) -> None:
        """The observed error among passed answers, from (model, decision, labelled, wrong)."""
        for model, decision, labelled, wrong in counts:
            if decision == "answer" and labelled:
                self.observed_error.labels(self.model_label(model)).set(wrong / labelled)

    def count_client_error(self, kind: str) -> None:
        self.client_errors.labels(kind).inc()

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
