"""J reference answers from one request: the reference model is asked for J different answers
to the question at once, as a numbered list (FEWL §4.1: "instruct a single reference LLM to
generate multiple diversified answers"; C.6: the answers come "via only two GPT calls", one for
the references and one for the pairs). The other mode, J independent samples of the same
prompt, is :func:`veracity.methods.fewl.run.references_for`'s default.

The prompt is ours; the reply is parsed by number (``1.``, ``2)``, ``3:``), an answer running
on over several lines until the next number. Missing answers are "" (not scored), never made up.
"""

from __future__ import annotations

import re

REFERENCE_MODES = ("samples", "one-call")
"""samples: J independent answers to the answer prompt (sampled when J > 1); one-call: one
request asking for J diversified answers."""

LIST_PROMPT = (
    "Write {j} different answers to the question below. Each one must answer it on its own, in "
    "one or two sentences; make them differ from one another in wording and, where the "
    "question allows, in what they say. Number them 1 to {j}, one per line, and write nothing "
    "else.\n\nQuestion: {question}"
)
_NUMBERED = re.compile(r"^\s*(?:\*\*)?(\d{1,3})\s*[.):]\s*(?:\*\*)?\s*(.*)$")


def list_prompt(question: str, j: int) -> str:
    """The one-call prompt for ``j`` answers."""
    return LIST_PROMPT.format(j=j, question=question.strip())


def parse_list(reply: str, j: int) -> list[str]:
    """The answers numbered 1..j in a reply, in order; "" where an answer is missing. A number
    seen twice keeps its first answer; numbers above j are ignored."""
    found: dict[int, list[str]] = {}
    current: int | None = None
    for line in reply.splitlines():
        match = _NUMBERED.match(line)
        if match and 1 <= int(match.group(1)) <= j and int(match.group(1)) not in found:
            current = int(match.group(1))
            found[current] = [match.group(2).strip()]
        elif match:
            current = None  # a repeated or out-of-range number: not part of an answer
        elif current is not None and line.strip():
            found[current].append(line.strip())
    return [" ".join(found.get(k, [])).strip() for k in range(1, j + 1)]
