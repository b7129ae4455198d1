"""Chat templates chosen by the user: ``--chat-template FILE|NAME`` for any in-process model.

Models without a chat template (base models such as Llama-2-7B, MPT-7B or OPT-1.3B) need one
to be asked a question at all, and a model's own template can be swapped for another. A
template is a Jinja file (or a ``tokenizer_config.json`` holding one), or a known name:

- ``chatml``: ``<|im_start|>role`` ... ``<|im_end|>`` turns;
- ``llama-2``: ``[INST] <<SYS>> ... <</SYS>> ... [/INST]`` (Meta's chat format);
- ``plain``: ``User: ...`` / ``Assistant:`` lines, for base models;
- ``raw``: no template at all (raw completion): the messages' texts joined by blank lines, so
  a base model continues exactly the text of the prompt.

The choice is part of the backend's identity, so it is recorded with every run and in the
cache key of every generation.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from veracity.errors import ConfigError
from veracity.paths import user_path
from veracity.types import Message

RAW = "raw"
KNOWN: dict[str, str] = {
    "chatml": (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
        "'<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
    "llama-2": (
        "{% if messages and messages[0]['role'] == 'system' %}"
        "{% set system = messages[0]['content'] %}{% set turns = messages[1:] %}"
        "{% else %}{% set system = '' %}{% set turns = messages %}{% endif %}"
        "{% for m in turns %}{% if m['role'] == 'user' %}"
        "{{ bos_token + '[INST] ' }}{% if loop.first and system %}"
        "{{ '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' }}{% endif %}"
        "{{ m['content'] | trim + ' [/INST]' }}"
        "{% else %}{{ ' ' + m['content'] | trim + ' ' + eos_token }}{% endif %}{% endfor %}"
    ),
    "plain": (
        "{{ bos_token }}{% for m in messages %}"
        "{{ m['role'] | capitalize + ': ' + m['content'] + '\\n\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
    ),
}
NAMES = (*KNOWN, RAW)


def load_chat_template(source: str) -> str:
    """Template text from the text itself, a template file, or a tokenizer_config.json."""
    if "{{" in source or "{%" in source:
        return source
    path = user_path(source)
    if not path.is_file():
        raise ConfigError(f"chat template file not found: {path} (known names: "
                          f"{', '.join(NAMES)})")
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".json":
        return text
    try:
        template = json.loads(text).get("chat_template")
    except (ValueError, AttributeError):
        template = None
    if isinstance(template, list):  # named variants; "default" is what chat uses
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    if not isinstance(template, str):
        raise ConfigError(f"{path} has no 'chat_template' string")
    return template


def compile_chat_template(text: str) -> Any:
    """A sandboxed Jinja template with the helpers Hugging Face chat templates expect."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
    try:
        return env.from_string(text)
    except TemplateError as exc:
        raise ConfigError(f"chat template does not compile: {exc}") from None


@dataclass(frozen=True)
class ChatTemplate:
    """A user-chosen way of turning chat messages into a model's prompt text."""

    name: str
    """A known name, or ``file`` for a template read from a file or given as text."""
    text: str | None
    """The Jinja source; None in raw completion mode."""
    compiled: Any = field(default=None, compare=False, repr=False)

    @property
    def sha(self) -> str:
        return hashlib.sha256((self.text or RAW).encode("utf-8")).hexdigest()[:16]

    def describe(self) -> dict[str, str]:
        """For the backend's identity (run.json, cache key): the name and a hash of the text."""
        return {"name": self.name, "sha256": self.sha}

    def render(self, messages: Sequence[Message], bos_token: str = "", eos_token: str = "") -> str:
        """The prompt text with the generation prompt (the assistant's turn left open); a
        template that rejects the conversation raises jinja2's ``TemplateError``.

        >>> resolve_template("chatml").render([Message("user", "Hi")])
        '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
        >>> resolve_template("raw").render([Message("system", "Be brief."), Message("user", "Hi")])
        'Be brief.\\n\\nHi'
        """
        if self.text is None:
            return bos_token + "\n\n".join(m.content for m in messages)
        compiled = self.compiled if self.compiled is not None else compile_chat_template(self.text)
        return str(compiled.render(
            messages=[{"role": m.role, "content": m.content} for m in messages],
            add_generation_prompt=True, bos_token=bos_token, eos_token=eos_token))


def resolve_template(source: str) -> ChatTemplate:
    """A known name (chatml, llama-2, plain, raw), a Jinja file, a tokenizer_config.json, or
    the template text itself; compiled at once, so a bad template fails before any model call."""
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"chat template must be a name ({', '.join(NAMES)}) or a file")
    if source == RAW:
        return ChatTemplate(RAW, None)
    name, text = (source, KNOWN[source]) if source in KNOWN else ("file", load_chat_template(source))
    return ChatTemplate(name, text, compile_chat_template(text))
