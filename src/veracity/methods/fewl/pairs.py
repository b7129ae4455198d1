"""Intentionally-wrong / corrected answer pairs for FEWL: our prompt, a robust parser, and
generation with one call per question, retries, and a report of what still failed.

What a corrected answer is follows the paper (appendix C.1): it negates the wrong statement
at a high level ("birds are mammals" -> "birds don't belong to the mammalian class"); it
does not have to state the true answer. The default prompt is our own wording of that: it
asks for R pairs in a fixed numbered template, ``N. Wrong: ...`` then ``N. Corrected: ...``,
shows a one-shot example, and (where the backend supports prefill) starts the reply with
``1. Wrong:``. A user's prompt file replaces it (``--pair-prompt``); ``{question}`` and
``{r}`` are filled in and the reply is parsed by the same tolerant parser, which also reads
the paper's "Wrong Answer / Non-Wrong Answer" labels.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from veracity.backends.fake import babble, last_user, stable
from veracity.client import LLMClient
from veracity.errors import BackendError, ConfigError, DataError
from veracity.jsontypes import JsonObject
from veracity.types import GenRequest, Sampling


@dataclass(frozen=True)
class Pair:
    """An intentionally wrong answer (IW) and its corrected restatement (CO)."""

    wrong: str
    corrected: str


EXAMPLE = (
    Pair("Saturn is the largest planet in the Solar System.",
         "Saturn does not hold the title of the Solar System's biggest planet."),
    Pair("The Earth is the largest planet.",
         "The Earth is far from being the biggest of the planets."),
    Pair("Pluto is the largest planet.", "Pluto is nowhere near the size of the largest planet."),
)
"""The one-shot example in the prompt; pairs copied from it are dropped when parsing."""

_EXAMPLE_TEXT = "Question: What is the largest planet in the Solar System?\n" + "\n".join(
    f"{i}. Wrong: {p.wrong}\n{i}. Corrected: {p.corrected}" for i, p in enumerate(EXAMPLE, 1))

PAIR_PROMPT = """Write {r} pairs of answers to the question below. In each pair:
- "Wrong" is an intentionally wrong answer: it sounds plausible but is false.
- "Corrected" negates that wrong answer at a high level: in other words of its own, it says
  that the wrong claim does not hold (for "Birds are mammals": "Birds are not part of the
  mammal class"). It denies the wrong answer; it need not say what the right answer is, and
  it must not be the wrong answer with only the word "not" inserted.
- Vary the way the corrected answers deny their wrong claims from one pair to the next.
Number the pairs 1 to {r}, one line per answer, exactly in the format of this example,
and write nothing else.

Example:
""" + _EXAMPLE_TEXT + """

Question: {question}"""

PREFILL = "1. Wrong:"
"""Where the backend can continue an assistant turn, the reply to the built-in prompt is
started in its template (small models follow the format far more often)."""
STOP = ("\nQuestion:",)
"""Small models go on to invent a next question; stop there."""
_FIELD = re.compile(r"\{(question|r)\}")


def pair_prompt(question: str, r: int, template: str = PAIR_PROMPT) -> str:
    """The pair-generation prompt for one question: ``{question}`` and ``{r}`` filled in
    (any other braces in a user's template are left as they are)."""
    values = {"question": question.strip(), "r": str(r)}
    return _FIELD.sub(lambda m: values[m.group(1)], template)


@dataclass(frozen=True)
class PairPrompt:
    """The pair prompt a run uses: the built-in one or a user's file; recorded with the run."""

    template: str = PAIR_PROMPT
    source: str = "builtin"
    """"builtin" or the path of the user's file."""

    @property
    def builtin(self) -> bool:
        return self.source == "builtin"

    @classmethod
    def from_file(cls, path: Path) -> PairPrompt:
        """A user's prompt file (UTF-8); it must contain ``{question}``."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read the pair prompt {path}: {exc}") from None
        if "{question}" not in text:
            raise DataError(f"pair prompt {path}: it must contain {{question}} (and may contain "
                            "{r}, the number of pairs)")
        return cls(text, str(path))

    def describe(self) -> JsonObject:
        return {"source": self.source, "prefill": PREFILL if self.builtin else None,
                "sha256": hashlib.sha256(self.template.encode("utf-8")).hexdigest(),
                "template": self.template}


_WRONG = r"intentionally[ -]wrong|incorrect|wrong|false"
_CORRECTED = r"non[- ]?wrong|not[- ]wrong|corrected|correction|correct|right|true"
_LABEL = re.compile(
    r"(?:^|(?<=[\s|;/,.)\]*>-]))"
    rf"(?:(?P<co>{_CORRECTED})|(?P<iw>{_WRONG}))"
    r"(?:\s+answer)?\s*(?:#?\s*(?P<num>\d{1,3}))?\s*[*_]*\s*[:：]",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"^\s*(?:[-*•>]\s*)?(?:pair\s*)?[(#]?(?P<num>\d{1,3})(?:[.):\]]|\s*-)\s*",
                     re.IGNORECASE)
_NEXT_QUESTION = re.compile(r"^question\s*\d*\s*:", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"^(?:<[^>]*>|\.{3}|…|n/?a|none)$", re.IGNORECASE)


def _clean(text: str) -> str:
    text = text.strip().strip("|").strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    if text[:1] in "\"“" and text[-1:] in "\"”":
        text = text[1:-1].strip()
    return "" if _PLACEHOLDER.match(text) else text


def _norm(text: str) -> str:
    """Case and punctuation folded: "2 + 2 = 4." and "2+2=4" are the same answer."""
    return re.sub(r"\W+", "", text.lower())


@dataclass
class _Label:
    kind: str
    number: int | None
    text: str


def _labels(text: str) -> list[_Label]:
    found: list[_Label] = []
    carried: int | None = None
    for raw in text.splitlines():
        line = raw.replace("**", "").replace("__", "").strip()
        if not line:
            continue
        if found and _NEXT_QUESTION.match(line):
            break
        match = _NUMBER.match(line)
        number = int(match.group("num")) if match else None
        rest = line[match.end():] if match else line
        hits = list(_LABEL.finditer(rest))
        if not hits:
            # "3." alone on a line numbers the labels that follow
            carried = number if match and not rest.strip() else carried
            continue
        for index, hit in enumerate(hits):
            end = hits[index + 1].start() if index + 1 < len(hits) else len(rest)
            own = hit.group("num")
            found.append(_Label(
                "co" if hit.group("co") else "iw",
                int(own) if own else number if number is not None else carried,
                _clean(rest[hit.end():end]),
            ))
        carried = None
    return found


def parse_pairs(text: str, limit: int | None = None) -> list[Pair]:
    """Pairs from a model's reply, tolerating missing or wrong numbers, fewer pairs than
    asked, markdown, both answers on one line, and any text around them.

    A corrected answer pairs with the wrong answer of the same number if one is waiting,
    else with the wrong answer just before it. Parsing stops at a "Question:" line after the
    first pair (a model inventing the next question). Empty, placeholder, duplicate and
    self-identical pairs, and pairs copied from the prompt's example, are dropped; at most
    ``limit`` are kept.
    """
    wrongs: list[tuple[int | None, str]] = []
    used: set[int] = set()
    matched: list[tuple[int, str]] = []
    previous_wrong: int | None = None
    for label in _labels(text):
        if label.kind == "iw":
            wrongs.append((label.number, label.text))
            previous_wrong = len(wrongs) - 1
            continue
        target = None
        if label.number is not None:
            target = next((i for i in reversed(range(len(wrongs)))
                           if wrongs[i][0] == label.number and i not in used), None)
        if target is None and previous_wrong is not None and previous_wrong not in used:
            target = previous_wrong
        previous_wrong = None
        if target is not None:
            used.add(target)
            matched.append((target, label.text))
    pairs: list[Pair] = []
    seen = {(_norm(p.wrong), _norm(p.corrected)) for p in EXAMPLE}
    copied = {_norm(p.wrong) for p in EXAMPLE} | {_norm(p.corrected) for p in EXAMPLE}
    for target, corrected in sorted(matched):
        wrong = wrongs[target][1]
        key = (_norm(wrong), _norm(corrected))
        if not wrong or not corrected or key[0] == key[1] or key in seen or key[0] in copied:
            continue
        seen.add(key)
        pairs.append(Pair(wrong, corrected))
    return pairs[:limit] if limit is not None else pairs


@dataclass(frozen=True)
class PairSettings:
    """How pairs are generated; every field is recorded with the run."""

    r: int = 25
    """Pairs asked for per question (the paper uses 25)."""
    temperature: float = 0.7
    """Sampling temperature of the pair call; retries use at least 0.7 so they differ."""
    max_tokens: int | None = None
    """Token budget of the pair call; default 48 per pair + 64."""
    retries: int = 2
    """Further attempts (new sample_index) for questions that gave too few pairs."""
    min_pairs: int = 1
    """A question with fewer parsed pairs than this after all attempts is reported, unscored."""
    seed: int = 0

    def sampling(self, attempt: int) -> Sampling:
        temperature = self.temperature if attempt == 0 else max(self.temperature, 0.7)
        return Sampling(temperature=temperature, max_tokens=self.max_tokens or 48 * self.r + 64,
                        seed=self.seed, stop=STOP)

    def __post_init__(self) -> None:
        if self.r < 1 or self.min_pairs < 1 or self.retries < 0:
            raise ConfigError("pairs: r and min_pairs must be >= 1 and retries >= 0")


@dataclass
class PairOutcome:
    """Parsed pairs, raw replies and attempts per question; indices that still failed."""

    pairs: list[list[Pair]]
    raw: list[str]
    attempts: list[int]
    errors: list[str | None] = field(default_factory=list)

    def failed(self, min_pairs: int = 1) -> list[int]:
        return [i for i, p in enumerate(self.pairs) if len(p) < min_pairs]


def generate_pairs(
    client: LLMClient, questions: Sequence[str], settings: PairSettings = PairSettings(),
    prompt: PairPrompt = PairPrompt(),
) -> PairOutcome:
    """One pair call per question, batched across the dataset; questions that parse to too
    few pairs (or fail) are asked again with a new sample_index, up to ``settings.retries``.
    Only the built-in prompt gets the prefill (a user's prompt may use other labels)."""
    n = len(questions)
    template = prompt.template
    prefill = PREFILL if prompt.builtin and client.backend.capabilities.prefill else ""
    outcome = PairOutcome([[] for _ in range(n)], [""] * n, [0] * n, [None] * n)
    todo = list(range(n))
    for attempt in range(settings.retries + 1):
        if not todo:
            break
        sampling = settings.sampling(attempt)
        requests = [GenRequest.user(pair_prompt(questions[i], settings.r, template), sampling,
                                    prefill=prefill, sample_index=attempt) for i in todo]
        stage = "fewl: pairs" if attempt == 0 else f"fewl: pairs retry {attempt}"
        results = client.generate_each(requests, stage)
        for i, result in zip(todo, results, strict=True):
            outcome.attempts[i] = attempt + 1
            if isinstance(result, BackendError):
                outcome.errors[i] = str(result)
                continue
            text = prefill + result.text
            if result.finish_reason == "length" and "\n" in text.strip():
                # the token budget ran out: the last line is cut mid-answer
                text = text.rstrip().rsplit("\n", 1)[0]
            pairs = parse_pairs(text, settings.r)
            if len(pairs) >= len(outcome.pairs[i]):
                outcome.pairs[i], outcome.raw[i] = pairs, prefill + result.text
            outcome.errors[i] = None
        todo = [i for i in todo if len(outcome.pairs[i]) < settings.min_pairs]
    for i in todo:  # still too few after every retry: say so, not only through the raw text
        outcome.errors[i] = outcome.errors[i] or (
            f"{len(outcome.pairs[i])} pair(s) parsed after {outcome.attempts[i]} attempt(s), "
            f"fewer than the {settings.min_pairs} required; the model's text is in pairs_raw")
    return outcome


_PAIRS_ASKED = re.compile(r"Write (\d+) pairs")
_ANSWERS_ASKED = re.compile(r"Write (\d+) different answers")


def fake_pairs(request: GenRequest) -> str:
    """Answers FEWL pair prompts in the numbered Wrong / Corrected template (one pair fewer
    than asked, after a chatty preamble) and requests for J different answers as a numbered
    list; any other prompt like ``stable``."""
    prompt = last_user(request)
    listed = _ANSWERS_ASKED.search(prompt)
    if listed is not None:  # FEWL's one-call references: a numbered list of answers
        return "\n".join(f"{i}. {babble(f'{prompt}#answer{i}', 8)}"
                         for i in range(1, int(listed.group(1)) + 1))
    asked = _PAIRS_ASKED.search(prompt)
    if asked is None:
        return stable(request)
    lines = ["Sure! Here are the pairs:"]
    for i in range(1, max(int(asked.group(1)) - 1, 1) + 1):
        lines.append(f"{i}. Wrong: {babble(f'{prompt}#wrong{i}#{request.sample_index}', 6)}")
        lines.append(f"{i}. Corrected: {babble(f'{prompt}#right{i}#{request.sample_index}', 6)}")
    text = "\n".join(lines)
    # like a real prefill-capable backend, return only the continuation of a prefill
    return text.split(request.prefill, 1)[1] if request.prefill and request.prefill in text \
        else text
