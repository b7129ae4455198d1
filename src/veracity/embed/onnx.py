"""ONNX Runtime for sentence-transformers models: local export, int8 quantisation, sessions.

The model's first module (the transformer) is exported once from the local weights with
``torch.onnx.export`` and run by ONNX Runtime; tokenisation and the later modules (pooling,
normalisation) stay those of sentence-transformers, so the vectors match the torch path.
Exports live under ``$VERACITY_ONNX_DIR`` (else ``onnx/`` beside the veracity cache) in a folder
named after the weights' fingerprint, so any number of caches and processes can share one export;
they are written atomically.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from veracity.errors import ConfigError
from veracity.paths import default_cache_path, user_path

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
QUANTISATION = "qint8-dynamic-per-channel"
"""How ``onnx-int8`` quantises: dynamic int8 weights, one scale per output channel."""


def missing_packages() -> list[str]:
    """The packages the ONNX path needs (runtime, exporter) that are not installed."""
    import importlib.util

    return [m for m in ("onnxruntime", "onnx", "onnxscript") if importlib.util.find_spec(m) is None]


def require_onnxruntime() -> None:
    """Raise a ConfigError with the install hint when ONNX Runtime or the exporter is missing."""
    missing = missing_packages()
    if missing:
        raise ConfigError(
            f"the ONNX embedder backend needs {', '.join(missing)}: pip install 'veracity[embed]' "
            "(or choose --embedder-option backend=torch)"
        )


def export_root() -> Path:
    """Where exports live: ``$VERACITY_ONNX_DIR``, else ``onnx/`` beside the veracity cache."""
    configured = os.environ.get("VERACITY_ONNX_DIR")
    return user_path(configured) if configured else default_cache_path().parent / "onnx"


def fingerprint(model_dir: Path) -> str:
    """Hash of the model directory's file names, sizes and weights' first MiB (cheap, stable)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(model_dir)}:{path.stat().st_size}\n".encode())
        if path.suffix in (".safetensors", ".bin"):
            with path.open("rb") as fh:
                digest.update(fh.read(1 << 20))
    return digest.hexdigest()[:16]


def export_dir(model_dir: Path, root: Path) -> Path:
    """The model's own folder under root, named after its fingerprint."""
    return root / f"{model_dir.name}-{fingerprint(model_dir)}"


def ensure_exported(model: Any, model_dir: Path, root: Path, int8: bool) -> Path:
    """Path of the model's ONNX file (int8 or float32), exporting it first if needed."""
    folder = export_dir(model_dir, root)
    fp32 = folder / "model.onnx"
    if not fp32.is_file():
        _atomic_write(fp32, lambda tmp: _export(model, tmp))
    if not int8:
        return fp32
    q8 = folder / "model_qint8.onnx"
    if not q8.is_file():
        _atomic_write(q8, lambda tmp: _quantise(fp32, tmp))
    return q8


def _atomic_write(target: Path, write: Any) -> None:
    # another process may export the same model at the same time: each writes its own file
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        path = Path(tmp) / target.name
        write(path)
        os.replace(path, target)


def _export(model: Any, path: Path) -> None:
    import logging

    import torch

    transformer = model[0].auto_model.eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    features = model.preprocess(["an example sentence", "a second, somewhat longer example"])
    missing = [name for name in INPUTS if name not in features]
    if missing:
        raise ConfigError(f"the ONNX backend needs a BERT-style tokenizer; {missing} not produced")
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    # the exporter prints its progress to stdout and notes on unrelated operators to the log
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exporter notes on axis names and pytree internals
        torch.onnx.export(
            Encoder().eval(), tuple(features[name] for name in INPUTS), str(path),
            input_names=list(INPUTS), output_names=["token_embeddings"],
            dynamic_shapes={name: {0: batch, 1: sequence} for name in INPUTS},
            opset_version=18, dynamo=True, external_data=False,
        )


def _quantise(source: Path, path: Path) -> None:
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))
    quantize_dynamic(source, path, weight_type=QuantType.QInt8, per_channel=True)
    leftovers = [p for p in path.parent.iterdir() if p != path]
    for p in leftovers:  # shape-inference scratch files
        if p.is_file():
            p.unlink()
        else:
            shutil.rmtree(p, ignore_errors=True)


class OnnxSession:
    """An ONNX Runtime session for the exported transformer, threads set from the cores."""

    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        # no busy-waiting between operators: on a shared CPU spinning threads burn the cores the
        # others need (measured 23 % less wall and CPU time per batch on 2 busy cores)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                     if p in ort.get_available_providers()]
        self._session = ort.InferenceSession(str(path), options, providers=providers)

    def run(self, features: dict[str, Any]) -> npt.NDArray[np.float32]:
        feeds = {name: features[name].numpy().astype(np.int64, copy=False) for name in INPUTS}
        out = self._session.run(["token_embeddings"], feeds)[0]
        return np.asarray(out, dtype=np.float32)
