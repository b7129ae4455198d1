"""A question-answering task scored for correctness and with gamma: ``veracity/gamma_qa``."""

from __future__ import annotations

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

from veracity.data.qa import load_items
from veracity.inspect.gamma import gamma_scorer


@task
def gamma_qa(
    dataset: str = "builtin",
    limit: int | None = None,
    question_field: str | None = None,
    n: int = 10,
    ball: str = "ascii-control",
    embedder: str = "st/default",
    threshold: float = 0.05,
    form: str = "sin",
    seed: int = 0,
    max_tokens: int = 64,
) -> Task:
    """Answer each question at temperature 0, score it against its references (``includes``)
    and with gamma; the settings are ``veracity gamma``'s.

    Args:
        dataset: what ``veracity gamma --dataset`` reads: builtin, truthfulqa:PATH,
            webquestions:PATH, jsonl:PATH, csv:PATH.
        limit: only the first K questions.
        question_field: question field / column of a JSONL or CSV dataset.
        n: perturbed prompts per answer.
        ball: perturbation family.
        embedder: veracity embedder spec.
        threshold: gamma below this counts as certified trustworthy.
        form: ``sin`` or ``paper-code``.
        seed: seed of the ball.
        max_tokens: per answer (``veracity gamma``'s default 64).
    """
    items = load_items(dataset, limit, question_field)
    samples = [Sample(id=item.id, input=item.question, target=list(item.references),
                      metadata=dict(item.metadata)) for item in items]
    return Task(
        dataset=MemoryDataset(samples, name=dataset.split(":", 1)[-1]),
        solver=generate(),
        scorer=[includes(), gamma_scorer(n=n, ball=ball, embedder=embedder, threshold=threshold,
                                         form=form, seed=seed, temperature=0.0, max_tokens=max_tokens)],
        config=GenerateConfig(temperature=0.0, max_tokens=max_tokens, seed=seed),
    )
