"""Embedding throughput of st/default on torch, ONNX Runtime and ONNX int8, on the same texts.

The texts are the FEWL bench's (questions, references, wrong / corrected pairs, answers), the
first ``--texts`` distinct ones. Each backend is loaded first (the ONNX export, once per machine,
is not timed), then embeds all texts through the embedder's own length-sorted batching. Prints
texts/s per backend, the largest cosine deviation from the torch vectors, the largest γ
difference on groups of 11 texts (an answer and 10 "perturbed" ones), and the largest γ
difference on recorded generations of built-in questions (SmolLM2-135M's answers, scored as
``veracity gamma --recorded FILE`` does; any such file with ``--recorded``). A path qualifies
as the default when its cosines stay >= 0.999 and both γ differences within 1e-3 of torch's;
the last line is the fastest qualifying path's texts/s over torch's.

    python bench/embed_throughput.py [--texts 10000] [--recorded FILE]
    python bench/embed_throughput.py --smoke     # 200 texts, at most 5 recorded answers (CI)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from veracity.client import CachedEmbedder
from veracity.embed.base import Embedder, Matrix
from veracity.embed.st import BACKENDS, DEFAULT_BACKEND
from veracity.methods.gamma.core import gamma_from_embeddings, score_answers
from veracity.methods.gamma.recorded import read_recorded
from veracity.registry import load_embedder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fewl_scoring import make_recorded  # noqa: E402  (the sibling bench's text generator)

MIN_COSINE, MAX_GAMMA_DIFF, GROUP = 0.999, 1e-3, 11
RECORDED = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gamma_builtin_smollm2.jsonl"
"""The first 3 built-in questions, answered 11 times each by the embedded default (SmolLM2-135M)."""


def bench_texts(n: int) -> list[str]:
    """The first n distinct texts of the FEWL bench's recorded files."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_recorded(Path(tmp), max(2, n // 50), 5, 25, seed=0)
        rows = {name: [json.loads(line) for line in path.read_text("utf-8").splitlines()]
                for name, path in paths.items()}
    texts = [r["question"] for r in rows["dataset"]]
    texts += [t for r in rows["references"] for t in r["references"]]
    texts += [t for r in rows["pairs"] for p in r["pairs"] for t in (p["wrong"], p["corrected"])]
    texts += [r["answer"] for r in rows["answers"]]
    return list(dict.fromkeys(texts))[:n]


def gammas(vectors: Matrix) -> list[float]:
    return [gamma_from_embeddings(vectors[i], vectors[i + 1 : i + GROUP])
            for i in range(0, len(vectors) - GROUP + 1, GROUP)]


def recorded_gammas(embedder: Embedder, rows: list[dict[str, Any]]) -> npt.NDArray[np.float64]:
    """γ of each recorded answer (NaN where it is empty), with no cache: fresh vectors."""
    values = score_answers([r["answer"] for r in rows], [r["perturbed_answers"] for r in rows],
                           CachedEmbedder(embedder))
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def sgemm_gflops(seconds: float = 2.0) -> float:
    """float32 matrix-product speed of this machine (NumPy's BLAS, every core), GFLOP/s."""
    rng = np.random.default_rng(0)
    a = rng.random((1024, 384), dtype=np.float32)
    b = rng.random((384, 1536), dtype=np.float32)
    a @ b
    done, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        a @ b
        done += 1
    return done * 2 * 1024 * 384 * 1536 / (time.perf_counter() - began) / 1e9


def linear_gflop(embedder: Any, texts: list[str]) -> float:
    """The transformer's matrix-product work for these texts (each text's own tokens, no
    padding): per token and layer, Q, K, V, output (4 x h x h) and the feed-forward (2 x h x i)."""
    model = embedder._model
    config = model[0].auto_model.config
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    tokens = sum(len(ids) for ids in model.tokenizer(texts, truncation=True,
                                                     max_length=model.max_seq_length)["input_ids"])
    return float(2 * layers * (4 * h * h + 2 * h * i) * tokens / 1e9)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=10_000)
    parser.add_argument("--recorded", type=Path, default=RECORDED,
                        help="recorded generations (veracity gamma --recorded format)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), same code path")
    args = parser.parse_args()
    rows = read_recorded(args.recorded)
    if args.smoke:
        args.texts, rows = 200, rows[:5]
    texts = bench_texts(args.texts)
    rates: dict[str, float] = {}
    vectors: dict[str, Matrix] = {}
    builtin: dict[str, npt.NDArray[np.float64]] = {}
    print(f"{len(texts)} distinct FEWL bench texts, st/default (all-MiniLM-L6-v2); "
          f"a path qualifies with cosine >= {MIN_COSINE} and |d gamma| <= {MAX_GAMMA_DIFF}")
    print(f"{len(rows)} recorded answers from {args.recorded.name}, each with "
          f"{len(rows[0]['perturbed_answers'])} perturbed answers")
    concrete = [b for b in BACKENDS if b != "auto"]  # torch first: the reference
    for backend in concrete:
        began = time.perf_counter()
        embedder = load_embedder("st/default", backend=backend)
        if backend == "torch":
            torch_embedder = embedder
        loaded = time.perf_counter() - began
        began = time.perf_counter()
        vectors[backend] = embedder.embed(texts)
        seconds = time.perf_counter() - began
        rates[backend] = len(texts) / seconds
        builtin[backend] = recorded_gammas(embedder, rows)
        name = backend.replace("-", "_")
        print(f"{name}_load_seconds: {loaded:.2f} s")
        print(f"{name}_seconds: {seconds:.2f} s")
        print(f"{name}_texts_per_s: {rates[backend]:.1f} texts/s")
    reference = gammas(vectors["torch"])
    qualifying = ["torch"]
    for backend in concrete[1:]:
        name = backend.replace("-", "_")
        deviation = float(1.0 - (vectors["torch"] * vectors[backend]).sum(axis=1).min())
        gamma_diff = float(np.max(np.abs(np.array(gammas(vectors[backend])) - np.array(reference))))
        print(f"{name}_max_cosine_deviation: {deviation:.2e} cosine")
        builtin_diff = float(np.nanmax(np.abs(builtin[backend] - builtin["torch"])))
        print(f"{name}_max_gamma_diff: {gamma_diff:.2e} gamma")
        print(f"{name}_builtin_max_gamma_diff: {builtin_diff:.2e} gamma")
        if deviation <= 1 - MIN_COSINE and max(gamma_diff, builtin_diff) <= MAX_GAMMA_DIFF:
            qualifying.append(backend)
    # float32 is bound by the matrix products: the ceiling of any float32 path on this machine
    work = linear_gflop(torch_embedder, texts)
    peak = sgemm_gflops(0.5 if args.smoke else 3.0)
    print(f"float32 matrix-product work: {1000 * work / len(texts):.3f} MFLOP/text")
    print(f"float32 matrix-product peak (NumPy sgemm): {peak:.1f} GFLOP/s")
    print(f"float32 ceiling: {peak / work * len(texts):.1f} texts/s "
          f"({peak / work * len(texts) / rates['torch']:.2f} x torch)")
    for backend in ("torch", "onnx"):
        print(f"{backend}_share_of_peak: {work / (len(texts) / rates[backend]) / peak:.2f} ratio")
    fastest = max(qualifying, key=lambda b: rates[b])
    print(f"qualifying paths: {', '.join(qualifying)}; fastest: {fastest}; "
          f"current default: {DEFAULT_BACKEND}")
    auto = load_embedder("st/default", backend="auto")
    choice = getattr(auto, "backend_choice", None) or {}
    figures = choice.get("texts_per_second", {})
    print(f"auto_choice: {choice.get('backend')} (torch {figures.get('torch')}, onnx "
          f"{figures.get('onnx')} texts/s in its short measurement, "
          f"{'measured now' if choice.get('measured') else 'remembered'}); "
          f"this bench's faster of the two: {max(('torch', 'onnx'), key=lambda b: rates[b])}")
    print(f"ratio_fastest_qualifying_{fastest.replace('-', '_')}_over_torch: "
          f"{rates[fastest] / rates['torch']:.2f} x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
