"""``backend=auto``: the faster float32 path measured once per CPU, remembered, and recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local_models import has_local_models
from veracity.embed.choice import choice_key, choose_backend, texts_per_second


def test_the_faster_backend_is_chosen_and_remembered(tmp_path: Path) -> None:
    path = tmp_path / "choice.json"
    calls: list[str] = []

    def measure(backend: str) -> float:
        calls.append(backend)
        return {"onnx": 450.0, "torch": 564.0}[backend]  # the AMX Xeon's figures

    first = choose_backend(path, "cpu-a", measure)
    assert (first["backend"], first["measured"]) == ("torch", True)
    assert first["texts_per_second"] == {"onnx": 450.0, "torch": 564.0}
    again = choose_backend(path, "cpu-a", measure)
    assert (again["backend"], again["measured"], calls) == ("torch", False, ["onnx", "torch"])
    other = choose_backend(path, "cpu-b", lambda b: {"onnx": 600.0, "torch": 555.0}[b])
    assert other["backend"] == "onnx"  # another CPU, its own measurement
    stored = json.loads(path.read_text())
    assert {k: v["backend"] for k, v in stored.items()} == {"cpu-a": "torch", "cpu-b": "onnx"}


def test_a_tie_keeps_onnx_and_a_corrupt_file_is_measured_again(tmp_path: Path) -> None:
    path = tmp_path / "choice.json"
    path.write_text("{not json")
    assert choose_backend(path, "k", lambda b: 100.0)["backend"] == "onnx"
    path.write_text(json.dumps({"k": {"backend": "tpu", "texts_per_second": {}}}))
    assert choose_backend(path, "k", lambda b: {"onnx": 1.0, "torch": 2.0}[b])["measured"] is True


def test_an_unwritable_choice_file_still_chooses(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with caplog.at_level("WARNING"):
        chosen = choose_backend(blocker / "choice.json", "k", lambda b: {"onnx": 1.0, "torch": 2.0}[b])
    assert chosen["backend"] == "torch" and "could not remember" in caplog.text


def test_texts_per_second_times_the_encoder() -> None:
    seen: list[int] = []
    rate = texts_per_second(lambda batch: seen.append(len(batch)), texts=("a",) * 10, rounds=2,
                            batch_size=4)
    assert seen == [4] + [4, 4, 2] * 2 and rate > 0
    assert choice_key("c", "m", 2) != choice_key("c", "m", 1)


@pytest.mark.real
@pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")
def test_st_default_chooses_by_measurement_and_records_the_figures(onnx_exports: Path) -> None:
    from veracity.embed.choice import CHOICE_FILE
    from veracity.registry import load_embedder

    embedder = load_embedder("st/default", onnx_dir=onnx_exports)
    choice = embedder.backend_choice  # type: ignore[attr-defined]
    assert choice["setting"] == "auto" and choice["backend"] in ("onnx", "torch")
    figures = choice["texts_per_second"]
    assert choice["backend"] == max(("onnx", "torch"), key=lambda b: (figures[b], b == "onnx"))
    assert embedder.identity()["backend"] == choice["backend"]
    assert (onnx_exports / CHOICE_FILE).is_file()
    again = load_embedder("st/default", onnx_dir=onnx_exports)
    assert again.backend_choice["measured"] is False  # type: ignore[attr-defined]
    assert again.identity() == embedder.identity()
    vectors = again.embed(["the same vectors either way"])
    assert vectors.shape == (1, 384)
