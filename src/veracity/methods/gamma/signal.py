"""γ for ``veracity benchmark``: N = K − 1 perturbed answers per question around the shared
greedy answer (the same requests as a ``veracity gamma`` run with that N, so a benchmark after
such a run reuses its answers from the cache)."""

from __future__ import annotations

from veracity.method import Signal, SignalRequest, SignalUnavailable
from veracity.methods.gamma.core import GammaSettings, score_answers
from veracity.perturb import perturb
from veracity.runs.common import Context
from veracity.types import Generation, GenRequest


def signal(ctx: Context, request: SignalRequest) -> list[Signal]:
    """γ (sin form, ascii-control ball) of each shared greedy answer; lower = more trustworthy."""
    n = request.budget - 1
    if n < 1:
        raise SignalUnavailable("γ needs a budget of at least 2 calls per question")
    if request.model is None:
        raise SignalUnavailable("γ asks the model perturbed questions: no model for a recorded file")
    settings = GammaSettings(n=n, sampling=request.sampling, seed=request.seed,
                             allow_large_n=True)
    client = ctx.client(request.model)
    drafted = client.identity().get("decode") == "draft"
    answers = [a.text.strip() if a is not None else "" for a in request.answers]
    balls = [perturb(item.question, n, settings.ball, settings.seed) for item in request.items]
    requests = [GenRequest.user(p, settings.sampling, draft=answer if drafted else "")
                for ball, answer in zip(balls, answers, strict=True) for p in ball]
    replies = client.generate_each(requests, stage="benchmark: γ perturbed answers")
    texts = [r.text.strip() if isinstance(r, Generation) else None for r in replies]
    groups = [texts[k * n:(k + 1) * n] for k in range(len(answers))]
    complete = [None not in g and a is not None for g, a in zip(groups, request.answers,
                                                                strict=True)]
    gammas = score_answers([a if ok else "" for a, ok in zip(answers, complete, strict=True)],
                           [[t or "" for t in g] for g in groups],
                           ctx.embedder(request.embedder), settings.form)
    return [Signal("gamma", tuple(gammas), higher_is_better=False, baseline=False,
                   settings={"n": n, "ball": settings.ball, "form": settings.form,
                             "seed": settings.seed})]
