"""The gamma scorer run through inspect_ai's own eval(), offline against the mock OpenAI
server, compared with ``veracity gamma`` on the same questions and the same server."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("inspect_ai", reason="needs the inspect extra")

from inspect_ai import Task  # noqa: E402
from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.log import EvalLog, read_eval_log  # noqa: E402
from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser  # noqa: E402
from inspect_ai.scorer import includes  # noqa: E402
from inspect_ai.solver import generate, system_message  # noqa: E402

from mock_openai import MockOpenAI, Received, Reply, normal_answer  # noqa: E402
from veracity.cli import main  # noqa: E402
from veracity.errors import ConfigError  # noqa: E402
from veracity.inspect import gamma_qa, gamma_scorer  # noqa: E402
from veracity.inspect.gamma import answered_prompt  # noqa: E402
from veracity.perturb import perturb  # noqa: E402
from veracity.stats import auroc  # noqa: E402

# the mock answers "echo: <last user message>": a question naming its reference is answered
# correctly, the others are not; the echoed control characters make gamma > 0
QUESTIONS = [
    {"id": "q1", "question": "Is Paris the capital of France?", "references": ["Paris"]},
    {"id": "q2", "question": "What is the capital of Italy?", "references": ["Rome"]},
    {"id": "q3", "question": "Name the largest planet, Jupiter or Mars?", "references": ["Jupiter"]},
    {"id": "q4", "question": "Who wrote the play about the Danish prince?", "references": ["Shakespeare"]},
    {"id": "q5", "question": "How many legs does a spider have?", "references": ["eight", "8"]},
]
N = 3


def echo(received: Received) -> Reply:
    """The mock's normal echo, with the fields a strict client needs (id, model, created)."""
    body = normal_answer(received.path, received.body)
    return Reply(body=body | {"id": "chatcmpl-echo", "model": "test-model", "created": 0}, good=True)


@pytest.fixture
def mock(monkeypatch: pytest.MonkeyPatch) -> Any:
    with MockOpenAI(chooser=echo) as server:
        monkeypatch.setenv("MOCK_BASE_URL", server.url)
        monkeypatch.setenv("MOCK_API_KEY", "mock-key")
        monkeypatch.setenv("OPENAI_API_KEY", "mock-key")
        yield server


@pytest.fixture
def questions(tmp_path: Path) -> Path:
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return path


def run(task: Task, tmp_path: Path) -> EvalLog:
    [log] = inspect_eval(task, model="openai-api/mock/test-model",
                         model_args={"stream": False},
                         model_base_url=os.environ["MOCK_BASE_URL"],  # a new server: a new client
                         log_dir=str(tmp_path / "logs"), display="none", max_connections=4,
                         max_retries=0, timeout=30)
    assert log.status == "success", log.error
    return log


def veracity_gamma(mock: MockOpenAI, questions: Path) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, [
        "gamma", "--dataset", f"jsonl:{questions}", "--model", "openai/test-model",
        "--base-url", mock.url, "--embedder", "hash/256", "-n", str(N), "--json", "--no-cache", "-q"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    return records if isinstance(records, list) else records["records"]


def test_gamma_qa_equals_veracity_gamma(mock: MockOpenAI, questions: Path, tmp_path: Path) -> None:
    log = run(gamma_qa(dataset=f"jsonl:{questions}", n=N, embedder="hash/256"), tmp_path)
    assert log.samples is not None and len(log.samples) == len(QUESTIONS)
    ours = {r["id"]: r for r in veracity_gamma(mock, questions)}
    gammas, incorrect = [], []
    for sample in log.samples:
        assert sample.scores is not None
        score = sample.scores["gamma_scorer"]
        record = ours[str(sample.id)]
        assert score.answer == record["answer"] == f"echo: {record['prompt']}"
        assert score.metadata is not None
        assert score.metadata["perturbed_prompts"] == record["perturbed_prompts"] == \
            perturb(record["prompt"], N, "ascii-control", 0)
        assert score.metadata["perturbed_answers"] == record["perturbed_answers"]
        assert record["gamma"] > 0
        assert score.as_float() == pytest.approx(record["gamma"], abs=1e-9)
        correct = sample.scores["includes"].value == "C"
        assert score.metadata["correct"] == (1.0 if correct else 0.0)
        assert score.explanation is not None and score.explanation.split()[0] == score.metadata["verdict"]
        gammas.append(record["gamma"])
        incorrect.append(not correct)
    assert sum(incorrect) == 3  # q1 and q3 name their reference
    assert log.results is not None
    metrics = {name: m.value for s in log.results.scores if s.name == "gamma_scorer"
               for name, m in s.metrics.items()}
    assert metrics["gamma_mean"] == pytest.approx(sum(gammas) / len(gammas), abs=1e-9)
    assert metrics["share_below_threshold"] == sum(g < 0.05 for g in gammas) / len(gammas)
    assert metrics["gamma_auroc"] == pytest.approx(auroc(gammas, incorrect))
    # every perturbed call went through inspect's model API to the same server
    bodies = [r.body for r in mock.received if r.path.endswith("/chat/completions")]
    assert len(bodies) == 2 * len(QUESTIONS) * (N + 1)


def test_gamma_auroc_by_hand(mock: MockOpenAI, tmp_path: Path) -> None:
    """Known answers with hand-made gammas: the AUROC metric counts pairs as defined."""
    from inspect_ai.scorer import SampleScore, Score

    from veracity.inspect.gamma import gamma_auroc, gamma_mean, share_below_threshold

    def sample(gamma: float, correct: float | None, below: bool | None) -> SampleScore:
        return SampleScore(score=Score(value=gamma, metadata={"correct": correct, "below_threshold": below}))

    scores = [sample(0.1, 1.0, False), sample(0.3, 0.0, False), sample(0.2, 1.0, False),
              sample(0.02, 0.0, True), sample(math.nan, 1.0, None)]
    # incorrect {0.3, 0.02} vs correct {0.1, 0.2}: pairs won 2 of 4
    assert gamma_auroc()(scores) == pytest.approx(0.5)
    assert gamma_mean()(scores) == pytest.approx((0.1 + 0.3 + 0.2 + 0.02) / 4)
    assert share_below_threshold()(scores) == pytest.approx(0.25)
    assert math.isnan(gamma_auroc()([sample(0.1, 1.0, False)]))


def test_context_is_kept_and_unscorable_inputs_are_unscored(mock: MockOpenAI, tmp_path: Path) -> None:
    """A system message a solver adds is sent with every perturbed prompt; an input that ends
    without a user turn is unscored (NaN), not an error of the eval."""
    task = Task(dataset=[Sample(input="What is 2 + 2?", target="4")],
                solver=[system_message("Answer briefly."), generate()],
                scorer=[includes(), gamma_scorer(n=2, embedder="hash/64")])
    log = run(task, tmp_path)
    assert log.samples is not None
    perturbed = [r.body for r in mock.received][1:]
    assert len(perturbed) == 2
    assert all(b["messages"][0] == {"role": "system", "content": "Answer briefly."} for b in perturbed)
    asked = [b["messages"][1]["content"] for b in perturbed]  # sent concurrently: any order
    assert sorted(asked) == sorted(perturb("What is 2 + 2?", 2, "ascii-control", 0))

    with pytest.raises(ConfigError, match="does not follow a user turn"):
        answered_prompt([ChatMessageSystem(content="x"), ChatMessageAssistant(content="y")])
    assert answered_prompt([ChatMessageUser(content="q"), ChatMessageAssistant(content="a")]).text == "q"


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="n must be"):
        gamma_scorer(n=0)
    with pytest.raises(ConfigError, match="unknown gamma form"):
        gamma_scorer(form="cos")
    with pytest.raises(ConfigError):
        gamma_scorer(ball="no-such-ball")


def test_inspect_cli_runs_gamma_qa(mock: MockOpenAI, questions: Path, tmp_path: Path) -> None:
    """``inspect eval veracity/gamma_qa`` in a new process, found through the entry point."""
    inspect = Path(sys.executable).parent / "inspect"
    done = subprocess.run(
        [str(inspect), "eval", "veracity/gamma_qa", "--model", "openai-api/mock/test-model",
         "-M", "stream=false", "-T", f"dataset=jsonl:{questions}", "-T", "embedder=hash/256",
         "-T", f"n={N}", "--log-dir", str(tmp_path / "logs"), "--display", "none", "--max-retries", "0"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [path] = (tmp_path / "logs").glob("*.eval")
    log = read_eval_log(str(path))
    assert log.status == "success" and log.samples is not None
    ours = {r["id"]: r["gamma"] for r in veracity_gamma(mock, questions)}
    for sample in log.samples:
        assert sample.scores is not None
        assert sample.scores["gamma_scorer"].as_float() == pytest.approx(ours[str(sample.id)], abs=1e-9)
