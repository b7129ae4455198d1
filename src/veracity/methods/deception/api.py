"""Deception-based benchmarking (DB-MMLU) from Python: live, or scoring recorded answers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veracity.backends.base import Backend
from veracity.cache import Cache
from veracity.methods.deception.core import DEFAULT_MAX_TOKENS, PAPER_SAMPLING, DeceptionSettings
from veracity.methods.deception.prompt import DEFAULT_PROMPT, load_prompt_file
from veracity.methods.deception.records import DeceptionRecord, DeceptionResults
from veracity.methods.deception.run import run_deception, run_deception_recorded
from veracity.runs.common import api_context
from veracity.runs.result import RunResult
from veracity.types import Sampling


def deception(
    dataset: str,
    model: str | Backend = "llamacpp/default",
    subjects: Sequence[str] | None = None,
    limit_per_subject: int | None = None,
    greedy: bool = False,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    seed: int = 0,
    retries: int = 1,
    threshold: float = 0.4,
    lenient: bool = False,
    cache: bool | str | Path | Cache = True,
    out: str | Path | None = None,
    susceptibility: str = "pooled",
    prompt_file: str | Path | None = None,
    system_prompt: bool = False,
) -> RunResult[DeceptionRecord, DeceptionResults]:
    """Answer every item of ``dataset`` (``db-mmlu:DIR`` or ``mc-jsonl:FILE`` with openings)
    normally and from its misleading opening; typed per-item records and the paper's metrics
    (``results``), also written to the run directory ``out`` when given.

    Sampling is the paper's (temperature 0.3, top-p 0.3, top-k 40) unless ``greedy``. The
    instruction goes in the first user turn (the paper's placement) unless ``system_prompt``;
    ``prompt_file`` replaces it and the worked example; ``susceptibility`` names the headline
    formula (``pooled`` or ``subject-weighted``; both are reported).
    """
    sampling = (Sampling(temperature=0.0, max_tokens=max_tokens, seed=seed) if greedy else
                Sampling(temperature=PAPER_SAMPLING.temperature, top_p=PAPER_SAMPLING.top_p,
                         top_k=PAPER_SAMPLING.top_k, repeat_penalty=PAPER_SAMPLING.repeat_penalty,
                         max_tokens=max_tokens, seed=seed))
    prompt = DEFAULT_PROMPT if prompt_file is None else load_prompt_file(prompt_file)
    settings = DeceptionSettings(sampling=sampling, threshold=threshold, retries=retries,
                                 lenient=lenient, susceptibility=susceptibility, prompt=prompt,
                                 system_prompt=system_prompt)
    with api_context(cache, model) as (ctx, specs):
        return run_deception(specs[0], dataset, ctx, settings,
                             None if out is None else Path(out), subjects, limit_per_subject)


def score_deception(
    results_dir: str | Path,
    dataset: str,
    subjects: Sequence[str] | None = None,
    model: str | None = None,
    threshold: float = 0.4,
    out: str | Path | None = None,
    susceptibility: str = "pooled",
) -> RunResult[DeceptionRecord, DeceptionResults]:
    """Score DB-MMLU answers recorded elsewhere (the authors' ``<subject>.csv[.gz]`` files,
    checked row by row against the ``db-mmlu:DIR`` dataset) with no model."""
    return run_deception_recorded(Path(results_dir), dataset, threshold,
                                  None if out is None else Path(out), subjects, model,
                                  susceptibility)

