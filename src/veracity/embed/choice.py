"""``backend=auto``: the faster float32 embedding path on this CPU, measured once and remembered.

Torch and ONNX Runtime give the same vectors (cosine within 3e-7), but which is faster depends
on the CPU: ONNX Runtime won by 1.08x on one machine, torch by 1.25x on an AMX Xeon. A short
measurement on first use decides; the result is kept per CPU fingerprint, thread count and
library versions in ``backend-choice.json`` beside the ONNX exports.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from veracity.jsontypes import JsonObject, JsonValue

logger = logging.getLogger(__name__)

CANDIDATES = ("onnx", "torch")
"""In order of preference on a tie (ONNX Runtime loads faster and needs no autograd)."""
CHOICE_FILE = "backend-choice.json"
SAMPLE_TEXTS = tuple(
    f"Sentence {i} of a short benchmark: the answer to question {i} is a phrase of a few words"
    + " and a clause" * (i % 5)
    for i in range(64)
)
"""What the measurement embeds: 64 texts of 15 to 27 words, like typical answers."""


def choice_key(cpu_fingerprint: str, model_fingerprint: str, threads: int) -> str:
    """What a measurement depends on: CPU, model, threads and both runtimes' versions.

    >>> choice_key("cpu", "model", 2).startswith("cpu/model/2/torch-")
    True
    """
    versions = []
    for package in ("torch", "onnxruntime"):
        try:
            versions.append(f"{package}-{version(package)}")
        except PackageNotFoundError:
            versions.append(f"{package}-none")
    return "/".join([cpu_fingerprint, model_fingerprint, str(threads), *versions])


def texts_per_second(encode: Callable[[list[str]], Any], texts: tuple[str, ...] = SAMPLE_TEXTS,
                     rounds: int = 3, batch_size: int = 32) -> float:
    """Best of ``rounds`` timings of embedding ``texts`` (after one warm-up batch)."""
    batches = [list(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    encode(batches[0])
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for batch in batches:
            encode(batch)
        best = min(best, time.perf_counter() - start)
    return len(texts) / max(best, 1e-9)


def read_choices(path: Path) -> dict[str, Any]:
    """The remembered choices; an unreadable or malformed file counts as none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _valid(entry: Any) -> bool:
    return (isinstance(entry, dict) and entry.get("backend") in CANDIDATES
            and isinstance(entry.get("texts_per_second"), dict))


def remembered_choice(path: Path, key: str) -> dict[str, Any] | None:
    """The choice measured before for ``key``, if any."""
    entry = read_choices(path).get(key)
    return {**entry, "measured": False} if isinstance(entry, dict) and _valid(entry) else None


def choose_backend(
    path: Path, key: str, measure: Callable[[str], float]
) -> JsonObject:
    """The remembered choice for ``key``, else measure every candidate with ``measure(backend)``
    (texts per second), keep the faster and remember it.

    Returns ``{"backend", "texts_per_second": {backend: figure}, "measured": bool}``.
    """
    remembered = remembered_choice(path, key)
    if remembered is not None:
        return remembered
    figures = {backend: round(measure(backend), 1) for backend in CANDIDATES}
    best = max(CANDIDATES, key=lambda b: (figures[b], -CANDIDATES.index(b)))
    entry: JsonObject = {"backend": best, "texts_per_second": figures,
             "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        remember_entry(path, key, entry)
    except OSError as exc:  # a read-only home still embeds, it only measures again next time
        logger.warning("st: could not remember the embedding backend choice in %s: %s", path, exc)
    logger.info("st: backend=auto chose %s (%s texts/s)", best, figures)
    return {**entry, "measured": True}


def remember_entry(path: Path, key: str, entry: Mapping[str, JsonValue]) -> None:
    """Store ``entry`` under ``key`` in the JSON file ``path`` (atomically replaced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    choices = read_choices(path)
    choices[key] = entry
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".choice-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(choices, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
