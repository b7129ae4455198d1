"""The gateway as an ASGI app: ``create_app(settings)`` returns a Starlette app to serve or mount.

Startup (the ASGI lifespan) loads the model and embedder, opens the cache and the traffic
log and starts the score workers; shutdown drains pending scores (bounded) and flushes the log.
Errors use the OpenAI body shape ``{"error": {"message", "type", "code"}}`` so unmodified
clients raise their usual exceptions.
"""

from __future__ import annotations

import functools
import gc
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from veracity.cache import Cache
from veracity.embed.base import Embedder
from veracity.errors import ConfigError, DataError
from veracity.jsontypes import JsonObject
from veracity.methods.gamma.calibration.core import read_calibration
from veracity.methods.gamma.calibration.trust import TrustScore
from veracity.registry import load_embedder
from veracity.serve.admission import Admission, Saturated
from veracity.serve.auth import KeyCheck
from veracity.serve.decide import Decisions, answer_logprob, without_logprobs
from veracity.serve.intake import Refused, media_problem, parse_body, read_body
from veracity.serve.jobs import LogWriter, ScoreBook, ScoreQueue, entry
from veracity.serve.local import LocalUpstream
from veracity.serve.metrics import GatewayMetrics
from veracity.serve.scoring import Exchange, Scorer, Started, discard, score_json
from veracity.serve.settings import GatewaySettings
from veracity.serve.sse import EventReader, event
from veracity.serve.upstream import HttpUpstream, Upstream, UpstreamError
from veracity.serve.verdicts import CalibratedThresholds, FixedThresholds, ThresholdSource
from veracity.serve.wire import ChatCompletion, ChatRequest
from veracity.traffic import StoredScore, TrafficLog

if TYPE_CHECKING:  # the otel extra is imported only when tracing is configured
    from veracity.serve.tracing import Tracing

log = logging.getLogger(__name__)
ROUTES = ("/v1/chat/completions", "/v1/models", "/v1/veracity/scores", "/v1/veracity/feedback",
          "/metrics", "/healthz", "/readyz")


def error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
          headers: dict[str, str] | None = None) -> JSONResponse:
    """An error in the OpenAI body shape."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def score_headers(score: dict[str, Any]) -> dict[str, str]:
    gamma, p_correct = score.get("gamma"), score.get("p_correct")
    return {"x-veracity-id": score["id"], "x-veracity-verdict": str(score.get("verdict")),
            "x-veracity-decision": str(score.get("decision", "answer")),
            "x-veracity-gamma": "none" if gamma is None else f"{gamma:.6f}",
            "x-veracity-p-correct": "none" if p_correct is None else f"{p_correct:.6f}"}


def first_answer(data: ChatCompletion) -> str | None:
    """The text of the first choice, or None (a tool call, a refusal without text)."""
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


class Gateway:
    """Everything one app owns: upstream, scorer, metrics, log, queues."""

    def __init__(self, settings: GatewaySettings, upstream: Upstream | None = None,
                 embedder: Embedder | None = None, thresholds: ThresholdSource | None = None,
                 tracing: Tracing | None = None) -> None:
        s = settings
        self.settings = s
        self.metrics = GatewayMetrics()
        self.keys = KeyCheck(s.api_keys, open_access=s.no_auth)
        self.upstream: Upstream = upstream or (
            HttpUpstream(s.upstream, s.upstream_api_key_env, s.timeout,
                         max_connections=s.max_concurrency * (s.n + 1) + 8)
            if s.upstream else LocalUpstream(s.model, s.max_tokens, s.model_options))
        self._embedder = embedder
        self.tracing = tracing
        if tracing is not None:  # the answer's and the perturbed calls' spans
            self.upstream = tracing.wrap(self.upstream)
        self.thresholds = thresholds or threshold_source(s)
        self.decisions = Decisions(s.policy, s.score_rate)
        escalate = None if s.policy is None else s.policy.escalate
        self.stronger: Upstream | None = None
        """The policy's second upstream (escalations); None: none, or the same one."""
        if escalate is not None and escalate.upstream is not None:
            self.stronger = HttpUpstream(escalate.upstream, escalate.api_key_env, s.timeout,
                                         max_connections=s.max_concurrency * (s.n + 1) + 8)
            if tracing is not None:
                self.stronger = tracing.wrap(self.stronger)
        self.admission = Admission(s.max_concurrency, s.queue,
                                   self.metrics.queue_depth.labels("requests").set)
        self.book = ScoreBook()
        self.scores = ScoreQueue(s.max_concurrency, s.queue, self.metrics.queue_depth.labels("scores").set)
        self.writer = LogWriter(None)
        self.tags: tuple[str, ...] = ()
        """Per gateway key, the owner tag its stored scores carry (:meth:`KeyCheck.tags`)."""
        self.cache: Cache | None = None
        self._scorer: Scorer | None = None
        self.ready = False

    @property
    def scorer(self) -> Scorer:
        if self._scorer is None:
            raise RuntimeError("gateway not started")
        return self._scorer

    async def start(self) -> None:
        s = self.settings
        await self.upstream.start()
        try:
            if self.stronger is not None:
                await self.stronger.start()
            embedder = self._embedder
            if embedder is None:
                embedder = await anyio.to_thread.run_sync(
                    functools.partial(load_embedder, s.embedder, **s.embedder_options))
            if isinstance(self.thresholds, CalibratedThresholds):
                model = None if s.upstream else self.upstream.scoring_key(s.model)[0]
                self.thresholds.check(embedder.spec, s.form, model)
            # a small page cache: the gateway's resident size must not grow with the file
            self.cache = None if s.no_cache else Cache(s.cache, page_cache_mib=4)
        except BaseException:  # no embedder, a calibration for another setup, no cache
            await self.upstream.aclose()
            if self.stronger is not None:
                await self.stronger.aclose()
            raise
        self._scorer = Scorer(s, self.upstream, embedder, self.cache, self.thresholds)
        self._scorer.start()
        traffic = None if s.log is None else TrafficLog(s.log, s.score_retention)
        if traffic is not None and s.api_keys:
            self.tags = await anyio.to_thread.run_sync(self.keys.tags, traffic.salt())
        self.writer = LogWriter(traffic)
        self.writer.start()
        policy = s.policy
        if policy is not None and policy.rule is not None and policy.rule.alpha is not None:
            self.metrics.error_bound.set(policy.rule.alpha)
        if traffic is not None:  # the observed error carries over a restart
            self.metrics.observe_feedback(await anyio.to_thread.run_sync(traffic.feedback_counts))
        self.scores.start()
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        abandoned = await self.scores.drain(self.settings.shutdown_grace)
        if abandoned:
            log.warning("shutdown: %d pending scores abandoned after %.0f s", abandoned,
                        self.settings.shutdown_grace)
        await self.writer.close()
        if self._scorer is not None:
            await self._scorer.aclose()
        await self.upstream.aclose()
        if self.stronger is not None:
            await self.stronger.aclose()
        if self.cache is not None:
            self.cache.close()
        if self.tracing is not None:  # export what is buffered (the exporter blocks)
            await anyio.to_thread.run_sync(self.tracing.shutdown)

    # --- routes -------------------------------------------------------------------------

    def owner(self, request: Request) -> int | None:
        return self.keys.owner(request.headers.get("authorization"))

    @staticmethod
    def refused() -> JSONResponse:
        return error(401, "missing or invalid gateway key: send 'Authorization: Bearer KEY'",
                     code="invalid_api_key")

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        if self.ready and self.writer.failure is None:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "not ready"}, status_code=503)

    async def metrics_page(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def models(self, request: Request) -> Response:
        if self.owner(request) is None:
            return self.refused()
        try:
            return JSONResponse(await self.upstream.models())
        except UpstreamError as exc:
            return self.upstream_failed(exc)

    async def score(self, request: Request) -> Response:
        owner = self.owner(request)
        if owner is None:
            return self.refused()
        score_id = request.path_params["score_id"]
        unknown = error(404, f"unknown or expired score id '{score_id}'", code="score_not_found")
        pending = self.book.get(score_id)
        if pending is not None:
            if (owner >= 0 and pending.owner != owner) or \
                    pending.created < time.time() - self.settings.score_retention:
                return unknown
            if pending.result is None:
                return JSONResponse({"id": score_id, "status": "pending"})
            result = pending.result
        else:  # from before a restart, or past the in-memory window
            log_file = self.writer.log
            stored = None if log_file is None else await anyio.to_thread.run_sync(
                log_file.stored_score, score_id)
            if stored is None or (owner >= 0 and stored.owner != self.tags[owner]):
                return unknown
            result = stored.score
        return JSONResponse({"id": score_id, "status": "done", "veracity": result},
                            headers=score_headers(result))

    async def feedback(self, request: Request) -> Response:
        """``POST /v1/veracity/feedback`` ``{"id": SCORE_ID, "correct": true|false}``: a label
        for a scored answer, kept in the traffic log (``veracity calibrate --from-traffic``)."""
        if self.owner(request) is None:
            return self.refused()
        try:
            raw = await read_body(request, self.settings.max_body, self.settings.client_timeout)
            body = parse_body(raw.decode("utf-8"))
        except Refused as exc:
            return error(exc.status, exc.message, code=exc.code, headers={"Connection": "close"})
        except (ClientDisconnect, UnicodeDecodeError):
            return error(400, "the request body: invalid JSON")
        except DataError as exc:
            return error(400, str(exc))
        if not isinstance(body, dict) or not isinstance(body.get("id"), str) or \
                not isinstance(body.get("correct"), bool):
            return error(400, 'feedback is {"id": "<the veracity id of a scored answer>", '
                              '"correct": true or false}')
        log_file = self.writer.log
        if log_file is None:
            return error(409, "this gateway keeps no traffic log (--no-log): feedback has nowhere "
                              "to go", code="no_traffic_log")
        found = await anyio.to_thread.run_sync(log_file.add_feedback, body["id"], body["correct"])
        if found is None:  # rows are written in batches: a score just served may not be yet
            await anyio.sleep(0.3)
            found = await anyio.to_thread.run_sync(log_file.add_feedback, body["id"],
                                                   body["correct"])
        if found is None:
            return error(404, f"no scored answer with id '{body['id'][:100]}' in the traffic log",
                         code="score_not_found")
        decision = found.decision or "answer"
        label = self.metrics.model_label(found.model)
        self.metrics.feedback.labels(label, decision, str(body["correct"]).lower()).inc()
        self.metrics.observe_feedback(await anyio.to_thread.run_sync(log_file.feedback_counts))
        return JSONResponse({"id": found.id, "correct": body["correct"], "decision": decision,
                             "gamma": found.gamma})

    async def chat(self, request: Request) -> Response:
        owner = self.owner(request)
        if owner is None:
            return self.refused()
        problem = media_problem(request.headers.get("content-type"))
        if problem:
            return error(415, problem, code="unsupported_media_type")
        try:
            raw = await read_body(request, self.settings.max_body, self.settings.client_timeout)
        except Refused as exc:  # the rest of the body is not read: the connection is closed
            self.metrics.count_client_error(exc.kind)
            return error(exc.status, exc.message, code=exc.code, headers={"Connection": "close"})
        except ClientDisconnect:
            self.metrics.count_client_error("disconnect")
            log.info("a client left before its request body was complete")
            return Response(status_code=400)  # nobody reads it; counted in requests
        try:
            body = parse_body(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return error(400, "the request body: invalid JSON (not UTF-8)")
        except DataError as exc:
            return error(400, str(exc))
        problem = check_body(body)
        if problem:
            return error(400, problem)
        if self.writer.failure is not None:  # nothing is served that the log cannot keep
            return error(503, "the gateway cannot write its traffic log (its disk is full or "
                         "unwritable); retry later", "server_error", "traffic_log_unwritable",
                         {"Retry-After": str(self.settings.retry_after)})
        if self.tracing is not None:
            self.tracing.asked(body)
        exchange_id = f"vrc-{uuid.uuid4().hex}"
        scored = self.decisions.scored(request.headers.get("x-request-id") or exchange_id,
                                       body["model"], request.headers.get("x-veracity-route"))
        if scored and isinstance(self.thresholds, CalibratedThresholds):
            try:
                self.scorer.thresholds_for(body["model"])
            except ConfigError as exc:  # made for another model: refused before anything is sent
                return error(400, str(exc), code="calibration_mismatch")
        try:
            await self.admission.acquire()
        except Saturated:
            return error(429, "the gateway is at capacity: retry later", "rate_limit_exceeded",
                         "rate_limit_exceeded", {"Retry-After": str(self.settings.retry_after)})
        release = True
        try:
            if body.get("stream"):
                response = await self.chat_stream(exchange_id, body, owner, scored)
                release = not isinstance(response, StreamingResponse)  # the stream releases it
                return response
            if not scored:
                return await self.pass_through(exchange_id, body)
            return await self.chat_once(exchange_id, body, owner)
        finally:
            if release:
                self.admission.release()

    def upstream_failed(self, exc: UpstreamError) -> JSONResponse:
        self.metrics.upstream_errors.labels(exc.kind).inc()
        return error(exc.status, exc.message, exc.error_type, exc.code,
                     None if exc.retry_after is None else {"Retry-After": exc.retry_after})

    async def pass_through(self, exchange_id: str, body: ChatRequest) -> Response:
        """A request left out of scoring: the upstream's answer as it is, marked unscored."""
        began = time.perf_counter()
        try:
            data = await self.upstream.chat(body)
        except UpstreamError as exc:
            return self.upstream_failed(exc)
        self.observe_upstream(body["model"], began)
        self.metrics.unscored.labels(self.metrics.model_label(body["model"])).inc()
        data["veracity"] = {"id": exchange_id, "scored": False, "decision": "answer"}
        return JSONResponse(data, headers={"x-veracity-id": exchange_id,
                                           "x-veracity-decision": "answer",
                                           "x-veracity-scored": "false"})

    def start_perturbed(self, exchange: Exchange) -> Started | None:
        """Inline mode: the perturbed calls go out with the request for the answer. (Async
        mode makes them later, from its bounded score queue.)"""
        return self.scorer.start_perturbed(exchange) if self.settings.mode == "inline" else None

    async def chat_once(self, exchange_id: str, body: ChatRequest, owner: int) -> Response:
        began = time.perf_counter()
        asked = Exchange(exchange_id, body["model"], body, None)
        gamma = self.decisions.needs_gamma
        started = self.start_perturbed(asked) if gamma else None
        added = self.decisions.needs_logprobs and not body.get("logprobs")
        try:
            try:  # the answer's log-probabilities, when the policy uses them: no extra call
                data = await self.upstream.chat({**body, "logprobs": True} if added else body)
            except UpstreamError as exc:
                return self.upstream_failed(exc)
            upstream_ms = self.observe_upstream(body["model"], began)
            exchange = replace(asked, answer=first_answer(data))
            logprob = answer_logprob(data) if self.decisions.needs_logprobs else None
            if added:
                data = without_logprobs(data)
            if self.settings.mode == "inline":
                wire = await self.run_score(exchange, upstream_ms, began, started,
                                            logprob=logprob, gamma=gamma)
                if wire["decision"] == "escalate":
                    data = await self.escalate(exchange, data, wire, began)
                elif wire["decision"] == "abstain":
                    data = self.abstained(data, wire)
                data["veracity"] = wire
                return JSONResponse(data, headers=score_headers(wire))
            data["veracity"] = self.enqueue(exchange, owner, upstream_ms, began)
            return JSONResponse(data, headers={"x-veracity-id": exchange_id})
        finally:
            discard(started)  # not awaited when the answer failed or could not be scored

    async def chat_stream(self, exchange_id: str, body: ChatRequest, owner: int,
                          scored: bool = True) -> Response:
        """A streamed answer; its score (or, unscored, a mark) in a last chunk. A policy's
        decision is reported there but cannot act: the answer has already been sent."""
        began = time.perf_counter()
        asked = Exchange(exchange_id, body["model"], body, None)
        started = self.start_perturbed(asked) if scored else None
        try:
            stream = await self.upstream.stream(body)
        except UpstreamError as exc:
            discard(started)
            return self.upstream_failed(exc)
        except BaseException:
            discard(started)
            raise
        closed = False

        async def close() -> None:
            """Once, whether the stream ran to its end, failed, or never started (a client
            that left before the first chunk: the generator's own finally never runs)."""
            nonlocal closed
            if not closed:
                closed = True
                discard(started)  # a stream cut short is not scored
                await stream.aclose()
                self.admission.release()

        async def events() -> AsyncIterator[bytes]:
            reader = EventReader()
            done: bytes | None = None
            try:
                try:
                    async for chunk in stream.chunks:
                        for ev in reader.feed(chunk):
                            if reader.is_done(ev):
                                done = ev
                            else:
                                yield ev
                    tail = reader.rest()
                    if tail.strip() and not reader.is_done(tail):
                        yield tail + reader.separator
                except UpstreamError as exc:
                    self.metrics.upstream_errors.labels(exc.kind).inc()
                    failure = {"error": {"message": f"{exc.message} (mid-stream; the answer is "
                                         "incomplete and was not scored)", "type": exc.error_type,
                                         "code": exc.code}}
                    yield event(failure, reader.separator)
                    return
                upstream_ms = self.observe_upstream(body["model"], began)
                exchange = replace(asked, answer=reader.answer)
                if not scored:
                    self.metrics.unscored.labels(self.metrics.model_label(body["model"])).inc()
                    score: JsonObject = {"id": exchange_id, "scored": False, "decision": "answer"}
                elif not (reader.finished or reader.done):  # ended cleanly, but short of the end
                    discard(started)
                    self.metrics.upstream_errors.labels("incomplete_stream").inc()
                    score = self.unscored(exchange, owner, upstream_ms, began, "incomplete_stream",
                                          "the upstream's stream ended before the answer was complete "
                                          "(no finish_reason, no [DONE]): not scored")
                elif self.settings.mode == "inline":
                    score = await self.run_score(exchange, upstream_ms, began, started)
                else:
                    score = self.enqueue(exchange, owner, upstream_ms, began)
                if score.get("decision", "answer") != "answer":
                    score["acted"] = False  # the streamed answer is already with the client
                final = {"id": exchange_id, "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": body["model"], "choices": [], "veracity": score}
                yield event(final, reader.separator)
                if done is not None:
                    yield done
            finally:
                await close()

        return ClosingStream(events(), close, media_type="text/event-stream",
                             headers={"x-veracity-id": exchange_id, "cache-control": "no-cache"})

    # --- scoring --------------------------------------------------------------------------

    def observe_upstream(self, model: str, began: float) -> float:
        seconds = time.perf_counter() - began
        self.metrics.upstream_seconds.labels(self.metrics.model_label(model)).observe(seconds)
        return 1000 * seconds

    async def run_score(self, exchange: Exchange, upstream_ms: float, began: float,
                        started: Started | None = None, escalated: bool = False,
                        scorer: Scorer | None = None, logprob: float | None = None,
                        gamma: bool = True) -> JsonObject:
        """Score the exchange and decide; the score as the client gets it. ``gamma`` False:
        a policy deciding on ``logprob`` alone; no perturbed call is made."""
        if gamma:
            score = await (scorer or self.scorer).score(exchange, started)
        else:
            score = replace(self.scorer.describe(exchange, None), n=0,
                            timings={"scoring_ms": 0.0})
        return self.finish(exchange, score, upstream_ms, began, escalated, logprob)

    def abstained(self, data: ChatCompletion, wire: dict[str, Any]) -> ChatCompletion:
        """An answer the policy abstains on: withheld (its text replaced) or only flagged."""
        withheld = self.decisions.withheld(data)
        wire["withheld"] = withheld is not None
        return data if withheld is None else withheld

    async def escalate(self, exchange: Exchange, data: ChatCompletion, wire: dict[str, Any],
                       began: float) -> ChatCompletion:
        """Ask the policy's stronger model, score its answer in turn (logged as its own
        exchange, ``<id>-escalated``); the response to return. ``wire`` gains ``escalation``."""
        policy = self.settings.policy
        assert policy is not None and policy.escalate is not None
        upstream = self.stronger or self.upstream
        body: ChatRequest = {**exchange.body, "model": policy.escalate.model or exchange.model}
        asked = Exchange(f"{exchange.id}-escalated", body["model"], body, None)
        second_began = time.perf_counter()
        added = self.decisions.needs_logprobs and not body.get("logprobs")
        try:
            answered = await upstream.chat({**body, "logprobs": True} if added else body)
        except UpstreamError as exc:  # no stronger answer: the first one, as the fallback says
            self.metrics.upstream_errors.labels(exc.kind).inc()
            then = policy.escalate.otherwise
            self.metrics.decisions.labels(self.metrics.model_label(body["model"]), then,
                                          "escalated").inc()
            wire["escalation"] = {"model": body["model"], "error": exc.message, "decision": then}
            return self.abstained(data, wire) if then == "abstain" else data
        upstream_ms = self.observe_upstream(body["model"], second_began)
        second = replace(asked, answer=first_answer(answered))
        logprob = answer_logprob(answered) if self.decisions.needs_logprobs else None
        if added:
            answered = without_logprobs(answered)
        scorer = self.scorer if self.stronger is None else self.scorer.on(self.stronger)
        found = await self.run_score(second, upstream_ms, second_began, escalated=True,
                                     scorer=scorer, logprob=logprob,
                                     gamma=self.decisions.needs_gamma)
        wire["escalation"] = {"model": body["model"], "veracity": found}
        if found["decision"] == "abstain":
            return self.abstained(answered, found)
        return answered

    def finish(self, exchange: Exchange, score: TrustScore, upstream_ms: float,
               began: float, escalated: bool = False,
               logprob: float | None = None) -> JsonObject:
        """Timings, decision, metrics and the traffic log of a finished (or failed) score;
        its JSON."""
        score = replace(score, timings={**score.timings, "upstream_ms": upstream_ms,
                                        "total_ms": 1000 * (time.perf_counter() - began)})
        m, label = self.metrics, self.metrics.model_label(exchange.model)
        if "scoring_ms" in score.timings:
            m.scoring_seconds.labels(label).observe(score.timings["scoring_ms"] / 1000)
        if score.gamma is not None:
            m.gamma.labels(label).observe(score.gamma)
        cost = None
        if score.tokens:
            spent = score.tokens.get("prompt", 0) + score.tokens.get("completion", 0)
            m.scoring_tokens.labels(label).observe(spent)
            prices = self.settings.prices
            cost = None if prices is None else prices.cost(
                exchange.model, score.tokens.get("prompt", 0), score.tokens.get("completion", 0))
            if cost is not None:
                m.scoring_cost.labels(label).inc(cost)
        if score.error:
            m.scoring_errors.labels(label, score.error_kind or "scoring").inc()
        m.verdicts.labels(label, score.verdict).inc()
        decided = self.decisions.decide(score.gamma, logprob, escalated)
        score = replace(score, decision=decided.decision, decision_reason=decided.reason)
        m.decisions.labels(label, decided.decision, "escalated" if escalated else "first").inc()
        wire = score_json(score)
        if cost is not None:
            wire["cost_usd"] = cost
        if self.decisions.needs_logprobs:
            wire["logprob"] = logprob
        self.writer.put(entry(score, wire, exchange.answer or ""))
        if self.tracing is not None:
            self.tracing.scored(score, exchange.answer, logprob)
        return wire

    def enqueue(self, exchange: Exchange, owner: int, upstream_ms: float, began: float) -> JsonObject:
        """Queue an async-mode score; the pending object the client gets."""
        self.book.add(exchange.id, owner)

        async def job() -> None:
            self.keep(exchange.id, owner, await self.run_score(exchange, upstream_ms, began))

        if not self.scores.offer(job if self.tracing is None else self.tracing.bind(job)):
            return self.unscored(exchange, owner, upstream_ms, began, "queue_full",
                                 "not scored: the score queue was full")
        return {"id": exchange.id, "status": "pending", "url": f"/v1/veracity/scores/{exchange.id}"}

    def unscored(self, exchange: Exchange, owner: int, upstream_ms: float, began: float, kind: str,
                 why: str) -> JsonObject:
        """An answer returned without a score: logged and counted; what the client gets (in
        async mode the pending object, its score already done)."""
        score = replace(self.scorer.describe(exchange, None), error=why, error_kind=kind)
        wire = self.finish(exchange, score, upstream_ms, began)
        if self.settings.mode == "inline":
            return wire
        self.book.add(exchange.id, owner)
        self.keep(exchange.id, owner, wire)
        return {"id": exchange.id, "status": "skipped", "url": f"/v1/veracity/scores/{exchange.id}"}

    def keep(self, score_id: str, owner: int, score: dict[str, Any]) -> None:
        """An async-mode score, done: fetchable from memory, and from the log after a restart."""
        self.book.finish(score_id, score)
        tag = self.tags[owner] if 0 <= owner < len(self.tags) else None
        self.writer.put(StoredScore(score_id, time.time(), tag, score))


def threshold_source(settings: GatewaySettings) -> ThresholdSource:
    """The calibration file's thresholds when one is given, else fixed ones."""
    if settings.calibration is not None:
        return CalibratedThresholds(read_calibration(settings.calibration), settings.ball,
                                    settings.n, settings.force)
    return FixedThresholds(settings.thresholds)


class ClosingStream(StreamingResponse):
    """A streamed response that runs ``close`` when it is over, however it ends."""

    def __init__(self, content: AsyncIterator[bytes], close: Callable[[], Awaitable[None]],
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._close = close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._close()


def check_body(body: Any) -> str | None:
    """What is wrong with a chat request body, if anything."""
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "'model' must be a non-empty string"
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return "'messages' must be a non-empty list"
    if not isinstance(body.get("stream", False), bool):
        return "'stream' must be true or false"
    return None


class CountRequests:
    """ASGI middleware: requests by route and status, and the number in flight."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = next((r for r in ROUTES if path == r or path.startswith(r + "/")), "other")

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(route, str(message["status"])).inc()
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, counted)
        finally:
            self.metrics.in_flight.dec()


def create_app(settings: GatewaySettings, *, upstream: Upstream | None = None,
               embedder: Embedder | None = None, thresholds: ThresholdSource | None = None,
               freeze_gc: bool = False, tracing: Tracing | None = None) -> Starlette:
    """The gateway app; ``app.state.gateway`` holds its parts (metrics registry, settings).

    ``freeze_gc``: for a process that serves only this app (``veracity serve``): once started,
    everything loaded so far (libraries, model, embedder) is moved out of the garbage
    collector's sight, so full collections no longer walk it between requests (measured:
    6 % less CPU per request under load, and a shorter latency tail).
    ``tracing``: OpenTelemetry spans of every chat request (:mod:`veracity.serve.tracing`).
    """
    gateway = Gateway(settings, upstream, embedder, thresholds, tracing)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gateway.start()
        if freeze_gc:
            gc.freeze()
        try:
            yield
        finally:
            await gateway.stop()

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", gateway.chat, methods=["POST"]),
            Route("/v1/models", gateway.models, methods=["GET"]),
            Route("/v1/veracity/scores/{score_id}", gateway.score, methods=["GET"]),
            Route("/v1/veracity/feedback", gateway.feedback, methods=["POST"]),
            Route("/metrics", gateway.metrics_page, methods=["GET"]),
            Route("/healthz", gateway.healthz, methods=["GET"]),
            Route("/readyz", gateway.readyz, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    app.add_middleware(CountRequests, metrics=gateway.metrics)
    if tracing is not None:
        from veracity.serve.tracing import TraceChat

        app.add_middleware(TraceChat, tracing=tracing)
    if settings.cors_origins:  # none by default: browsers then refuse pages other sites serve
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type"],
                           expose_headers=["x-veracity-id", "x-veracity-verdict", "x-veracity-decision",
                                           "x-veracity-scored", "x-veracity-gamma",
                                           "x-veracity-p-correct"], max_age=600)
    return app
