"""Fine-tuning examples in a chosen prompt format: the prompt rendered by a ``--chat-template``
(chatml, llama-2, plain, raw, a file) the way the hf backend renders it when it answers, the
answer after it, then EOS; the loss on the answer and EOS only. This is how base models without
a chat template of their own (the paper's OPT-1.3B) are trained."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from veracity.backends.templates import resolve_template
from veracity.errors import ConfigError, DataError
from veracity.types import Message


def _ids(tokenizer: Any, text: str) -> list[int]:
    # the template writes the BOS itself, as in the hf backend
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]]


def templated_examples(tokenizer: Any, pairs: Sequence[tuple[str, str]],
                       chat_template: str) -> list[dict[str, Any]]:
    """Pre-tokenized records (``input_ids``, ``completion_mask``) for TRL's SFTTrainer."""
    template = resolve_template(chat_template)
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ConfigError("the tokenizer names no EOS token: a fine-tuned answer could not end")
    bos, eos_text = tokenizer.bos_token or "", tokenizer.eos_token or ""
    out = []
    for prompt, answer in pairs:
        if not prompt.strip() or not answer.strip():
            continue
        text = template.render([Message("user", prompt)], bos_token=bos, eos_token=eos_text)
        # a prompt ending in a word ("Assistant:", raw text) is continued after a space
        joined = text + ("" if not text or text[-1].isspace() else " ") + answer.strip()
        prompt_ids, full = _ids(tokenizer, text), _ids(tokenizer, joined)
        shared = 0
        while shared < min(len(prompt_ids), len(full)) and prompt_ids[shared] == full[shared]:
            shared += 1
        if shared == len(full):
            continue  # the answer added no token
        out.append({"input_ids": [*full, int(eos)],
                    "completion_mask": [0] * shared + [1] * (len(full) - shared + 1)})
    if not out:
        raise DataError("no fine-tuning examples (every selected answer is empty)")
    return out
