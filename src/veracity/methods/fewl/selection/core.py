"""What ``fewl select`` exports from the chosen answers: in-context-learning prompts whose
worked examples are neighbour questions with their answers, and a chat-format fine-tuning set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def icl_prompts(
    questions: Sequence[tuple[str, str]],
    answers: Sequence[str | None],
    scores: Sequence[float | None],
    shots: Sequence[Sequence[int]],
    template: str = "{question}",
) -> list[dict[str, Any]]:
    """In-context-learning prompts: for question i, chat messages with the questions
    ``shots[i]`` (indices) and their answers as worked examples, then question i itself.

    ``questions`` holds (id, question) pairs; ``template`` formats each user turn.
    """
    out = []
    for (qid, question), examples in zip(questions, shots, strict=True):
        messages: list[dict[str, str]] = []
        for k in examples:
            messages.append({"role": "user", "content": template.format(question=questions[k][1])})
            messages.append({"role": "assistant", "content": answers[k] or ""})
        messages.append({"role": "user", "content": template.format(question=question)})
        out.append({"id": qid, "question": question, "messages": messages,
                    "examples": [{"id": questions[k][0], "fewl": scores[k]} for k in examples]})
    return out


def finetune_set(
    questions: Sequence[tuple[str, str]], answers: Sequence[str | None]
) -> list[dict[str, Any]]:
    """Chat-format supervised fine-tuning records ({"messages": [user, assistant]}), the
    layout OpenAI-style and TRL / Axolotl trainers read; questions without answer skipped."""
    return [{"messages": [{"role": "user", "content": question},
                          {"role": "assistant", "content": answer}]}
            for (_, question), answer in zip(questions, answers, strict=True) if answer]
