"""A tokenizer read from a tokenizer folder's files, with neither torch nor transformers.

The server backend only encodes, decodes and renders the chat template on our side. A folder
holding ``tokenizer.json`` (the ``tokenizers`` library's own serialization, what transformers'
fast tokenizers load) and ``tokenizer_config.json`` (named special tokens, added tokens, the chat
template) is all that takes: the ``tokenizers`` library does the first two, jinja2 the template,
rendered as transformers renders it (``transformers/utils/chat_template_utils.py``): a sandboxed
immutable environment, ``trim_blocks``, ``lstrip_blocks``, loop controls, ``raise_exception``,
a ``tojson`` that keeps non-ASCII and does not escape HTML, and the named special tokens
(``bos_token``, ``eos_token``, ...) as template variables. tests/model/test_tokenizer_equality.py
holds its ids, texts and rendered templates equal to transformers' for the models we ship.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, NoReturn

import jinja2
import jinja2.exceptions
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Tokenizer
from tokenizers.models import BPE

__all__ = ["FileTokenizer"]

_NAMED_SPECIAL = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
"""The named special tokens transformers passes to a chat template (its special_tokens_map)."""

_EXTRA_SPECIAL = ("extra_special_tokens", "additional_special_tokens")
"""The config keys listing further special tokens (transformers 5 and 4 spellings)."""

# transformers' decode clean-up (off unless the config turns it on, and never for BPE).
_CLEAN_UP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def _token_text(value: object) -> str | None:
    """A special token's text: a string, or the ``content`` of a serialized AddedToken."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _added_token(value: Mapping[str, Any]) -> AddedToken:
    """An AddedToken from its tokenizer_config.json form (``added_tokens_decoder`` values)."""
    return AddedToken(
        str(value["content"]),
        single_word=bool(value.get("single_word", False)),
        lstrip=bool(value.get("lstrip", False)),
        rstrip=bool(value.get("rstrip", False)),
        normalized=bool(value.get("normalized", True)),
        special=bool(value.get("special", False)),
    )


class FileTokenizer:
    """The tokenizer of a tokenizer folder, read with ``tokenizers`` and jinja2 only.

    Satisfies :class:`~forethought.models._prompt.PromptTokenizer` (what the prompt encoder
    needs), as transformers' tokenizers do.
    """

    def __init__(self, folder: Path) -> None:
        """Read ``folder``'s ``tokenizer.json``, ``tokenizer_config.json`` and chat template.

        Raises OSError when ``tokenizer.json`` is missing or unreadable, ValueError when a file
        is malformed.
        """
        self.folder = folder
        serialized = (folder / "tokenizer.json").read_text(encoding="utf-8")
        try:
            self._tok = Tokenizer.from_str(serialized)
        except Exception as exc:  # the Rust library raises a bare Exception on a bad file
            raise ValueError(f"tokenizer.json: {exc}") from exc
        config_file = folder / "tokenizer_config.json"
        config: dict[str, Any] = (
            json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        )
        self.special_tokens: dict[str, str] = {}
        """The named special tokens (``bos_token`` ...): the chat template sees them."""
        for name in _NAMED_SPECIAL:
            text = _token_text(config.get(name))
            if text is not None:
                self.special_tokens[name] = text
        extra = [
            text
            for key in _EXTRA_SPECIAL
            for value in config.get(key) or ()
            if (text := _token_text(value)) is not None
        ]
        self._register_added_tokens(config.get("added_tokens_decoder") or {}, extra)
        # What transformers' decode and encode do by default, unless the config says otherwise.
        self._clean_up = bool(config.get("clean_up_tokenization_spaces", False)) and (
            not isinstance(self._tok.model, BPE)
            or bool(
                config.get(
                    "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"
                )
            )
        )
        self._tok.encode_special_tokens = bool(config.get("split_special_tokens", False))
        self._tok.no_truncation()
        self._tok.no_padding()
        self.chat_template: str | None = self._read_template(config)
        """The default chat template (None when the folder has none)."""
        self._compiled: jinja2.Template | None = None

    def _register_added_tokens(self, decoder: Mapping[str, Any], extra: list[str]) -> None:
        """Add the config's added tokens, and every named or extra special token, as special.

        The same rule as transformers' fast tokenizer: a token tokenizer.json already knows
        keeps its id; a named special token is special (``decode(skip_special_tokens=True)``
        leaves it out) even where tokenizer.json forgot to flag it.
        """
        known_text = {str(t.content) for t in self._tok.get_added_tokens_decoder().values()}
        tokens = [
            _added_token(value)
            for _, value in sorted(decoder.items(), key=lambda item: int(item[0]))
            if isinstance(value, Mapping) and str(value.get("content")) not in known_text
        ]
        named = set(self.special_tokens.values())
        for text in [*self.special_tokens.values(), *extra]:
            if text not in known_text and all(str(t.content) != text for t in tokens):
                tokens.append(AddedToken(text, special=True, normalized=False))
        for token in tokens:
            if str(token.content) in named:
                token.special = True
        if tokens:
            self._tok.add_tokens(tokens)

    def _read_template(self, config: Mapping[str, Any]) -> str | None:
        """``chat_template.jinja`` (transformers 5's file), else the config's ``chat_template``.

        A config may hold several named templates; the prompt encoder uses the ``default`` one.
        """
        jinja_file = self.folder / "chat_template.jinja"
        if jinja_file.is_file():
            return jinja_file.read_text(encoding="utf-8")
        template = config.get("chat_template")
        if isinstance(template, str):
            return template
        if isinstance(template, list):
            named = {
                str(t.get("name")): str(t.get("template"))
                for t in template
                if isinstance(t, Mapping)
            }
            return named.get("default")
        return None

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (with the post-processor's BOS/EOS when asked)."""
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], *, skip_special_tokens: bool = False) -> str:
        """The text of ``ids``, special tokens left out when asked."""
        text: str = self._tok.decode(ids, skip_special_tokens=skip_special_tokens)
        if self._clean_up:
            for before, after in _CLEAN_UP:
                text = text.replace(before, after)
        return text

    def apply_chat_template(
        self,
        conversation: list[dict[str, str]],
        *,
        add_generation_prompt: bool = False,
        tokenize: Literal[False] = False,
    ) -> str:
        """The chat rendered as text by the folder's template (never tokenized here).

        Raises ValueError when the folder has no chat template, and jinja2's TemplateError
        when the template refuses the conversation (its ``raise_exception``).
        """
        del tokenize  # always text: the prompt encoder tokenizes the parts itself
        if self.chat_template is None:
            raise ValueError(f"{self.folder} has no chat template")
        if not conversation:
            raise ValueError("cannot render an empty conversation")
        if self._compiled is None:
            self._compiled = _environment().from_string(self.chat_template)
        # Messages are copied (a template may not change ours); keys whose value is None are
        # dropped, as transformers does.
        messages = [{k: v for k, v in m.items() if v is not None} for m in conversation]
        variables: dict[str, Any] = {
            **self.special_tokens,
            "messages": messages,
            "tools": None,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        return self._compiled.render(variables)


# -- the template environment -----------------------------------------------------------------


def _raise_exception(message: str) -> NoReturn:
    """What a template calls to refuse a conversation (e.g. roles out of order)."""
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """JSON without jinja2's HTML escaping and keeping non-ASCII (transformers' filter)."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    """Today's date in ``fmt`` (templates that print the date call it)."""
    return datetime.now().strftime(fmt)  # local time, as transformers renders it


class _TemplateDict:
    """``dict(...)`` in a template, without exposing the dict type itself to the sandbox."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, keys: Any, value: Any = None) -> dict[Any, Any]:
        """``dict.fromkeys`` for templates."""
        return dict.fromkeys(keys, value)


class _TemplateNamespace(jinja2.utils.Namespace):
    """jinja2's ``namespace`` refusing underscore-prefixed names (no reach into internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        # jinja2's own signature trick: ``self`` is positional so ``namespace(self=1)`` works.
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"a chat template cannot store {name!r} on a namespace (underscore-prefixed)"
            )


class _Generation(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body.

    transformers marks the assistant's tokens with it for training masks; a prompt has no use
    for the mark, but a template using the tag must still parse.
    """

    tags = {"generation"}  # noqa: RUF012 -- jinja2 declares it a mutable set

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        """The block's body, called through :meth:`_body`."""
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Callable[[], str]) -> str:
        return caller()


def _environment() -> ImmutableSandboxedEnvironment:
    """The jinja2 environment chat templates are rendered in (transformers' settings)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_Generation, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env
