"""Prompts as two parts: a shared context (cached as KV) and the per-call event.

The context -- task description, the action format, the current state -- is the same for every
event in a state, so its tokens form the prefix whose KV cache is reused. The event is the only
part a call must prefill. With a chat template the split falls where the user's message starts.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from forethought.policies import ActionForm, ActionSchema

__all__ = [
    "Prompt",
    "PromptEncoder",
    "PromptTokenizer",
    "describe_format",
    "prompt_length_bucket",
    "state_text",
]

_SENTINEL = "\x00EVENT\x00"


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt: ``context`` (task and state, shared by many calls) and ``event`` (this call)."""

    context: str
    event: str


def _describe(schema: Mapping[str, Any]) -> str:
    if "const" in schema:
        return repr(schema["const"]).replace("'", '"')
    if "enum" in schema:
        return " | ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " | ".join(_describe(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind in ("number", "integer"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        rng = f" {lo}..{hi}" if lo is not None and hi is not None else ""
        return f"{kind}{rng}"
    if kind == "object":
        inner = ", ".join(f'"{k}": {_describe(v)}' for k, v in schema.get("properties", {}).items())
        return "{" + inner + "}"
    if kind == "array":
        return f"[{_describe(schema.get('items', {}))}, ...]"
    return str(kind or "value")


def describe_format(schema: ActionSchema, form: ActionForm) -> str:
    """The instruction that tells the model which JSON to write."""
    js = schema.json_schema(form)
    required = set(js.get("required", []))
    fields = "; ".join(
        f'"{k}"{"" if k in required else " (optional)"}: {_describe(v)}'
        for k, v in js["properties"].items()
    )
    if form is ActionForm.COMPACT:
        legend = ", ".join(f'"{alias}" = {name}' for name, alias in schema.aliases.items())
        return (
            "Answer with one compact JSON object and nothing else. "
            f"Fields: {fields}. Keys: {legend}."
        )
    return (
        "Answer with one JSON object and nothing else, with a one-sentence reason. "
        f"Fields: {fields}."
    )


class PromptTokenizer(Protocol):
    """What the prompt encoder needs of a tokenizer.

    transformers' tokenizers (the local backends) and :class:`._file_tokenizer.FileTokenizer`
    (the server backend, without transformers) both satisfy it.
    """

    @property
    def chat_template(self) -> str | None:
        """The chat template (None: the prompt is plain text)."""

    def encode(self, text: str, /, *, add_special_tokens: bool = ...) -> list[int]:
        """Token ids of ``text``."""

    def decode(self, ids: list[int], /, *, skip_special_tokens: bool = ...) -> str:
        """The text of token ids."""

    def apply_chat_template(
        self,
        conversation: list[dict[str, str]],
        /,
        *,
        add_generation_prompt: bool = ...,
        tokenize: Literal[False] = ...,
    ) -> str:
        """The conversation rendered as text by the chat template."""


class PromptEncoder:
    """Turns prompts into (prefix ids, own ids) for one tokenizer, caching prefixes."""

    def __init__(self, tokenizer: PromptTokenizer, *, cache_size: int = 32) -> None:
        self._tok = tokenizer
        self._has_template = bool(tokenizer.chat_template)
        self._prefixes: OrderedDict[tuple[str, str, ActionForm], tuple[list[int], str]] = (
            OrderedDict()
        )
        self._cap = cache_size

    def _ids(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False)

    def _render(self, system: str) -> tuple[str, str]:
        """The prompt text before and after the event, with the event left out."""
        if not self._has_template:
            return f"{system}\n\nEvent: ", "\nAction: "
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": _SENTINEL},
        ]
        text = self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        before, _, after = text.partition(_SENTINEL)
        return before, after

    def encode(
        self, prompt: Prompt, schema: ActionSchema, form: ActionForm = ActionForm.COMPACT
    ) -> tuple[list[int], list[int]]:
        """Token ids of the shared prefix and of this call's own part."""
        key = (prompt.context, schema.fingerprint, form)
        hit = self._prefixes.get(key)
        if hit is None:
            system = f"{prompt.context}\n\n{describe_format(schema, form)}"
            before, after = self._render(system)
            hit = (self._ids(before), after)
            self._prefixes[key] = hit
            while len(self._prefixes) > self._cap:
                self._prefixes.popitem(last=False)
        else:
            self._prefixes.move_to_end(key)
        prefix, after = hit
        return prefix, self._ids(prompt.event + after)

    def decode(self, ids: list[int]) -> str:
        """The text of generated token ids (special tokens left out)."""
        return self._tok.decode(ids, skip_special_tokens=True)

    def encode_action(self, text: str) -> list[int]:
        """Token ids of an action's JSON text as the model would continue with it."""
        return self._ids(text)


def state_text(description: str, state_json: str) -> str:
    """The state as prompt text: the task description and the state as JSON.

    The planner and the executor's live tiers both build prompts with it, so a live call in a
    state reuses the KV cache the planner left for that state's prefix.
    """
    return f"{description.strip()}\n\nCurrent state: {state_json}"


def prompt_length_bucket(chars: int) -> int:
    """A prompt's length class: 0 up to 64 characters, then one more per doubling.

    What the executor and the planner learn of the live tiers' calls is kept per event type
    and length class: a long state prompt prefills for longer, so its calls may miss where
    short ones fit.
    """
    return max(0, math.ceil(math.log2(max(chars, 1) / 64)))
