"""Worked examples for FEWL-guided in-context learning (the paper's §5.1 and appendix C.11).

The examples of a test question come from a *pool* of training questions: by default the
questions whose top-scored candidate differs between FEWL and the baseline (single reference, no
laziness penalty), "the samples that can best show the improvement". Each test question gets its
K nearest pool questions (question-embedding cosine), each with the answer the rule scored
highest. The examples go into one user message, numbered, before the question (C.11's format in
our own words); ``turns`` gives them as earlier user / assistant turns instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from veracity.backends.fake import babble, digest
from veracity.errors import ConfigError, DataError
from veracity.types import GenRequest, Message

POOLS = ("differs", "all")
"""differs: training questions where FEWL and the baseline chose different answers (the
paper's pool); all: every training question with a chosen answer."""
FORMATS = ("message", "turns")
ICL_TEMPLATE = (
    "Below are some questions, each followed by an answer. Read them, then answer the last "
    "question in the same way.\n\n"
    "{examples}\n\n"
    "Now the question to answer.\n{question}"
)
"""One user message: ``{examples}`` (the numbered examples) then ``{question}`` (the test
question, in the run's answer template)."""
EXAMPLE = "Example question {i}: {question}\nExample answer {i}: {answer}"
_FIELD = re.compile(r"\{(examples|question)\}")


def differing_pool(fewl: Sequence[str | None], baseline: Sequence[str | None]) -> list[bool]:
    """Per training question: True when both rules chose an answer and the answers differ
    (compared after stripping spaces)."""
    if len(fewl) != len(baseline):
        raise ValueError("one FEWL and one baseline choice per question")
    return [f is not None and b is not None and f.strip() != b.strip()
            for f, b in zip(fewl, baseline, strict=True)]


def pool_flags(pool: str, chosen: dict[str, list[str | None]]) -> list[bool]:
    """Which training questions may serve as examples under ``pool``."""
    if pool not in POOLS:
        raise ConfigError(f"unknown example pool '{pool}'; known: {', '.join(POOLS)}")
    size = len(next(iter(chosen.values())))
    if pool == "all":
        return [True] * size
    if "fewl" not in chosen or "baseline" not in chosen:
        raise ConfigError("the 'differs' example pool compares the fewl and baseline rules: "
                          "select both (or use --pool all)")
    flags = differing_pool(chosen["fewl"], chosen["baseline"])
    if not any(flags):
        raise DataError("FEWL and the baseline chose the same answer for every training question: "
                        "the example pool is empty (use more candidates, or --pool all)")
    return flags


def check_template(template: str, source: str = "the ICL template") -> None:
    missing = [f for f in ("{examples}", "{question}") if f not in template]
    if missing:
        raise ConfigError(f"{source}: it must contain {', '.join(missing)}")


def single_message(examples: Sequence[tuple[str, str]], question: str,
                   template: str = ICL_TEMPLATE) -> Message:
    """All examples (question, answer) and the question in one user message; other braces in
    a user's template are left alone."""
    if not examples:
        raise ValueError("at least one example")
    shown = "\n\n".join(EXAMPLE.format(i=i, question=q, answer=a)
                        for i, (q, a) in enumerate(examples, 1))
    values = {"examples": shown, "question": question}
    return Message("user", _FIELD.sub(lambda m: values[m.group(1)], template))


def chat_turns(examples: Sequence[tuple[str, str]], question: str) -> list[Message]:
    """The examples as earlier user / assistant turns, then the question."""
    turns: list[Message] = []
    for q, a in examples:
        turns += [Message("user", q), Message("assistant", a)]
    return [*turns, Message("user", question)]


def fake_context(request: GenRequest) -> str:
    """Answers from the whole conversation (worked examples change the answer) and the sample
    index, 3 to 12 words long."""
    text = "\n".join(m.content for m in request.messages) + f"#{request.sample_index}"
    return babble(text, 3 + digest(text) % 10)
