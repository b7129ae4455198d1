"""``attention=auto``: flash attention where it is exact and no slower, decided at load.

Flash attention computes every query row on its own, so where the load-time probe
(:mod:`veracity.backends.llamacpp_exact`) finds a token's logits bit-identical however tokens
are batched, any shared prompt prefix can be reused and the answers do not depend on what came
before. Whether it is also faster depends on the CPU, the build and the model: a short timing of
both kernels on first load, on the work of a small γ group with each kernel's prefix reuse,
decides, and the result is remembered per CPU fingerprint, model
file, threads, batch split and llama-cpp-python version in ``attention-choice.json`` beside the
cache (as ``st``'s ``backend=auto`` remembers its embedding backend). The choice is recorded in
``run.json`` (``compute_path.attention``) and shown by ``veracity doctor``.

The kernel stays part of the model identity: a run that chose flash caches under the same keys
as ``attention=flash``, one that chose standard under those of ``attention=standard``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from veracity.embed.choice import read_choices, remember_entry
from veracity.paths import default_cache_path, user_path

if TYPE_CHECKING:
    from llama_cpp import Llama

logger = logging.getLogger(__name__)

CHOICE_FILE = "attention-choice.json"
KERNELS = ("flash", "standard")
TOLERANCE = 0.03
"""Flash counts as no slower at 97 % of standard's tokens/s or more: two short timings on a
shared CPU differ by a few per cent from noise alone, and flash brings exact prefix reuse."""
TIMING_PROMPT = ("Question: Which river flows through the capital of the country that hosted "
                 "the first modern Olympic Games? Answer in one sentence.")
TIMING_TOKENS = 16
"""Decode steps after each prompt of a timing round: a fraction of a second on small models."""
TIMING_SUFFIXES = (" ~}q", " 7#x")
"""What the timing's perturbed prompts append, like γ's perturbations: the prefix they share
with the prompt before is reused as a run reuses it."""
BUDGET = 3.0
"""Seconds of timing per kernel after which no further round runs."""


@dataclass(frozen=True)
class AttentionChoice:
    """Which attention kernel runs and why (``run.json`` → ``compute_path.attention``)."""

    setting: str
    """What was asked: auto, flash or standard."""
    kernel: str
    """What runs: flash or standard."""
    reason: str
    batch_invariant: bool | None = None
    """The probe's verdict on flash attention (None: not probed)."""
    tokens_per_second: dict[str, float] = field(default_factory=dict)
    """The timing that decided (per kernel), measured now or remembered."""
    measured: bool = False
    """Whether the timing ran at this load (False: remembered, or no timing needed)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Kernels(Protocol):
    """What the choice needs from a model being loaded."""

    def invariant(self) -> bool:
        """Whether flash attention passes the batch-invariance probe."""
        ...

    def tokens_per_second(self, kernel: str) -> float:
        """The speed of a small γ group's work with this kernel (:func:`group_speed`)."""
        ...


def choice_file() -> Path:
    """``$VERACITY_ATTENTION_CHOICE``, else ``attention-choice.json`` beside the cache."""
    configured = os.environ.get("VERACITY_ATTENTION_CHOICE")
    return user_path(configured) if configured else default_cache_path().parent / CHOICE_FILE


def choice_key(cpu: str, model: str, threads: int, n_batch: int, n_ubatch: int,
               extra_buffers: bool, gpu_layers: int, llama_cpp: str) -> str:
    """What a timing depends on.

    >>> choice_key("cpu", "model", 2, 32, 32, True, 0, "0.3.1")
    'cpu/model/t2/b32x32/xb1/gpu0/llama-cpp-python-0.3.1/group-timing'
    """
    # "group-timing": choices remembered from the earlier timing (a lone decode, no prefix
    # reuse, which understated flash) are not reused
    return (f"{cpu}/{model}/t{threads}/b{n_batch}x{n_ubatch}/xb{int(extra_buffers)}/"
            f"gpu{gpu_layers}/llama-cpp-python-{llama_cpp}/group-timing")


def faster(figures: dict[str, float]) -> str:
    """flash unless it is measurably slower than standard.

    >>> faster({"flash": 98.0, "standard": 100.0}), faster({"flash": 90.0, "standard": 100.0})
    ('flash', 'standard')
    """
    return "flash" if figures["flash"] >= (1.0 - TOLERANCE) * figures["standard"] else "standard"


def _remembered(path: Path, key: str) -> dict[str, Any] | None:
    entry = read_choices(path).get(key)
    if (isinstance(entry, dict) and entry.get("kernel") in KERNELS
            and isinstance(entry.get("tokens_per_second"), dict)
            and isinstance(entry.get("batch_invariant"), bool)):
        return entry
    return None


def busy() -> str | None:
    """Why a timing now would not be worth remembering: a load average above the cores."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    return f"load average {load:.1f} on {cores} cores" if load > cores else None


def choose_attention(setting: str, decode: str, kernels: Kernels, path: Path,
                     key: str, crowded: Callable[[], str | None] | None = None) -> AttentionChoice:
    """The kernel to run: flash or standard when named; for ``auto``, flash with
    ``decode=draft`` (which needs it), else flash where the probe shows batch-invariance and a
    timing (remembered under ``key`` in ``path``, else measured now and remembered) shows it
    no slower than standard. While ``crowded()`` names a reason (other jobs filling the CPU) no
    timing is taken: flash is chosen where it is exact, and remembered like a timed choice, so
    a machine's kernel (and so its answers) never changes from one load to the next."""
    if setting in KERNELS:
        probed = kernels.invariant() if setting == "flash" else None
        return AttentionChoice(setting, setting, "asked for", probed)
    if decode == "draft":
        return AttentionChoice(setting, "flash", "decode=draft verifies drafts with flash "
                               "attention", kernels.invariant())
    entry = _remembered(path, key)
    if entry is not None:
        figures = {k: float(v) for k, v in entry["tokens_per_second"].items()}
        if entry["kernel"] == "standard":
            return AttentionChoice(setting, "standard", f"{entry['reason']} (remembered)",
                                   bool(entry["batch_invariant"]), figures)
        if kernels.invariant():
            return AttentionChoice(setting, "flash", f"{entry['reason']} (remembered)", True,
                                   figures)
        return AttentionChoice(setting, "standard", "flash attention failed the batch-"
                               "invariance probe at this load", False, figures)
    why = (crowded or busy)()
    if not kernels.invariant():
        choice = AttentionChoice(setting, "standard", "flash attention is not batch-invariant "
                                 "here", False, measured=False)
    elif why is not None:
        # A timing on a crowded CPU measures the other jobs. Not choosing, or choosing again at
        # every load, would let one machine's answers change from one process to the next (the
        # kernel is part of the identity), so the exact kernel is taken untimed and remembered.
        choice = AttentionChoice(setting, "flash", f"flash attention is batch-invariant; not "
                                 f"timed ({why}), so flash, exact here", True, measured=False)
        logger.info("llamacpp: attention=auto chose flash untimed: %s", why)
    else:
        figures = {k: round(kernels.tokens_per_second(k), 1) for k in KERNELS}
        kernel = faster(figures)
        reason = ("flash attention is batch-invariant and no slower" if kernel == "flash" else
                  "flash attention is batch-invariant but slower here")
        choice = AttentionChoice(setting, kernel, reason, True, figures, measured=True)
    entry = {"kernel": choice.kernel, "reason": choice.reason,
             "batch_invariant": choice.batch_invariant,
             "tokens_per_second": choice.tokens_per_second,
             "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        remember_entry(path, key, entry)
    except OSError as exc:  # a read-only home still loads, it only measures again next time
        logger.warning("llamacpp: could not remember the attention choice in %s: %s", path, exc)
    logger.info("llamacpp: attention=auto chose %s (%s)", choice.kernel, choice.reason)
    return choice


def group_speed(llm: Llama, exact: bool, n_batch: int, rounds: int = 2,
                budget: float = BUDGET) -> float:
    """Best of ``rounds`` timings (after a warm-up) of the work of a small γ group, in tokens
    per second: the timing prompt, then ``len(TIMING_SUFFIXES)`` copies with meaningless
    characters appended, each followed by ``TIMING_TOKENS`` one-token decode steps, with the
    prompt prefix shared with the previous prompt kept as the backend keeps it: all of it where
    the kernel is exact (``exact``), else its whole ``n_batch`` chunks. The work counted is the
    same for both kernels (every prompt token and step), so a kernel that may reuse more is
    faster by what it saves, as in a run. The steps feed fixed tokens (the kernels' work does
    not depend on which token it is), so an early end of text cannot cut the timing short.
    Past ``budget`` seconds (a loaded machine) no further round is run, the warm-up counting
    as one. Leaves the context empty."""
    base = list(llm.tokenize(TIMING_PROMPT.encode("utf-8"), add_bos=True, special=False))
    prompts = [base] + [base + list(llm.tokenize(suffix.encode("utf-8"), add_bos=False,
                                                  special=False))
                        for suffix in TIMING_SUFFIXES]
    steps = (base * (TIMING_TOKENS // max(len(base), 1) + 1))[:TIMING_TOKENS]
    work = sum(len(p) + len(steps) for p in prompts)

    def once() -> float:
        llm.reset()  # type: ignore[no-untyped-call]
        llm._ctx.kv_cache_clear()  # type: ignore[no-untyped-call]
        began = time.perf_counter()
        previous: list[int] = []
        for prompt in prompts:
            shared = 0
            while shared < min(len(prompt) - 1, len(previous)) and prompt[shared] == previous[shared]:
                shared += 1
            llm.n_tokens = shared if exact else shared // n_batch * n_batch
            llm.eval(prompt[llm.n_tokens:])
            for token in steps:
                llm.eval([token])
            previous = prompt
        return work / max(time.perf_counter() - began, 1e-9)

    try:
        began = time.perf_counter()
        best = once()
        for _ in range(rounds):
            if time.perf_counter() - began > budget:
                break
            best = max(best, once())
        return best
    finally:
        llm.reset()  # type: ignore[no-untyped-call]
        llm._ctx.kv_cache_clear()  # type: ignore[no-untyped-call]
