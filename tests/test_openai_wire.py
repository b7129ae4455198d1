"""The OpenAI request body as a pure function, shared by the threaded backend and the
gateway; the backends' and gateway's modules without an import circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from veracity.backends.openai import OpenAIBackend
from veracity.backends.openai_wire import RequestShape, backend_identity, request_body
from veracity.types import GenRequest, Message, Sampling

SRC = Path(__file__).resolve().parents[1] / "src" / "veracity"
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "<|im_start|>assistant\n")


def ask(prefill: str = "", **sampling: object) -> GenRequest:
    config = Sampling(**sampling)  # type: ignore[arg-type]
    return GenRequest((Message("system", "Be brief."), Message("user", "2 + 2?")), config, prefill, 2)


def test_the_body_by_hand() -> None:
    path, body = request_body(RequestShape("m"), ask(temperature=0.5, max_tokens=8, seed=40))
    assert path == "/chat/completions"
    assert body == {"model": "m", "temperature": 0.5, "top_p": 1.0, "max_tokens": 8, "seed": 42,
                    "messages": [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "2 + 2?"}]}
    _, body = request_body(RequestShape("m", "continue", {"cache_prompt": False}),
                           ask("The answer is", stop=("\n",), top_k=5, repeat_penalty=1.1))
    assert body["messages"][-1] == {"role": "assistant", "content": "The answer is"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["stop"] == ["\n"] and body["top_k"] == 5 and body["cache_prompt"] is False
    assert body["repeat_penalty"] == body["repetition_penalty"] == 1.1


@pytest.mark.parametrize("options", [{}, {"prefill_mode": "continue", "extra_body": {"top_k": 3}},
                                     {"prefill_mode": "completions", "chat_template": CHATML,
                                      "bos_token": "<s>"}])
def test_the_backend_sends_what_the_function_builds(options: dict[str, object]) -> None:
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1/", **options)  # type: ignore[arg-type]
    try:
        for request in (ask(), ask("Sure:", stop=("x",))):
            assert backend.payload(request) == request_body(backend.shape, request)
        assert backend.identity() == backend_identity("http://127.0.0.1:9/v1", backend.shape)
        if options.get("prefill_mode") == "completions":
            path, body = backend.payload(ask("Sure:"))
            assert path == "/completions" and body["prompt"].startswith("<|im_start|>system\nBe brief.")
            assert body["prompt"].endswith("<|im_start|>assistantSure:")
            assert len(backend.identity()["chat_template"]) == 16
    finally:
        backend.close()


def test_the_gateway_shares_the_backends_cache_identity() -> None:
    pytest.importorskip("aiohttp", reason="needs the serve extra")
    from veracity.serve.upstream import HttpUpstream

    upstream = HttpUpstream("http://user:pw@127.0.0.1:9/v1/", "", 5.0, 4)
    backend = OpenAIBackend("mock-model", base_url="http://127.0.0.1:9/v1")
    try:
        assert upstream.scoring_key("mock-model") == (backend.spec, backend.identity())
    finally:
        backend.close()


def imports(path: Path) -> set[str]:
    """The veracity modules a file imports, anywhere in it (also in functions and under
    TYPE_CHECKING: a circle through a late import is still a circle)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("veracity"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("veracity"))
    return found


def test_backends_and_gateway_have_no_import_circle() -> None:
    modules = {f"veracity.{folder}.{p.stem}": p for folder in ("backends", "serve")
               for p in (SRC / folder).glob("*.py") if p.stem != "__init__"}
    graph = {name: imports(path) & modules.keys() for name, path in modules.items()}
    assert "veracity.backends.endpoints" not in graph["veracity.backends.openai"]
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import circle: {' -> '.join((*path, name))}"
        if name not in done:
            for target in sorted(graph[name]):
                visit(target, (*path, name))
            done.add(name)

    for name in sorted(graph):
        visit(name, ())
