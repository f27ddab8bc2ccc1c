"""A model's tokenizer alone, for the server backend (no torch, no transformers).

A tokenizer folder -- a GGUF's converted cache folder, a local model folder -- is read by
:class:`._file_tokenizer.FileTokenizer` (``tokenizers`` and jinja2, both core dependencies).
A Hugging Face id, a folder without ``tokenizer.json`` and a ``.gguf`` not yet converted need
transformers (and, for the ``.gguf``, torch: transformers' GGUF reader): the ``local`` extra.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from forethought.policies import ModelNotFound

from ._file_tokenizer import FileTokenizer
from ._model_source import ModelSource, gguf_cache_dir
from ._prompt import PromptTokenizer

if TYPE_CHECKING:  # the core install has no transformers; only its fallback below needs it
    from transformers import PreTrainedTokenizerBase

__all__ = ["load_tokenizer"]

_LOCAL = "pip install 'forethought[local]'"


def load_tokenizer(source: ModelSource, *, cache_dir: Path | None = None) -> PromptTokenizer:
    """Only the tokenizer of ``source`` (a converted GGUF's folder when cached, else its own).

    A server backend renders and tokenizes prompts on our side with it, so the shared state
    prefix is the same token ids on every call and the server's prefix cache hits.
    """
    if source.kind == "gguf":
        gguf = Path(source.location)
        folder = gguf_cache_dir(gguf, cache_dir)
        if (folder / "tokenizer.json").is_file():
            return _read_folder(source, folder)
        _need_local(
            source,
            "torch",
            "reading a tokenizer from a .gguf not yet converted needs transformers' GGUF reader "
            "(torch); convert it once with the local extra (any run of the local model does), "
            "or name a tokenizer folder instead (URL#tokenizer=PATH)",
        )
        return _transformers_tokenizer(source, str(gguf.parent), gguf.name)
    if source.kind == "dir" and (Path(source.location) / "tokenizer.json").is_file():
        return _read_folder(source, Path(source.location))
    _need_local(
        source,
        "transformers",
        "a Hugging Face id or a folder without tokenizer.json is read by transformers; "
        "name a folder holding tokenizer.json instead (URL#tokenizer=PATH)",
    )
    return _transformers_tokenizer(source, source.location, None)


def _read_folder(source: ModelSource, folder: Path) -> FileTokenizer:
    try:
        return FileTokenizer(folder)
    except (OSError, ValueError) as exc:
        raise ModelNotFound(
            "tokenizer", source.name, f"unreadable tokenizer in {folder}: {exc}"
        ) from None


def _need_local(source: ModelSource, module: str, why: str) -> None:
    """Raise ModelNotFound naming the fix when ``module`` (of the local extra) is missing."""
    if importlib.util.find_spec(module) is None or importlib.util.find_spec("transformers") is None:
        raise ModelNotFound("tokenizer", source.name, why, install=_LOCAL)


def _transformers_tokenizer(
    source: ModelSource, location: str, gguf_file: str | None
) -> PromptTokenizer:
    # Imported here: only these sources need it, and the core install has no transformers.
    from transformers import AutoTokenizer  # noqa: PLC0415

    try:
        tokenizer = (
            AutoTokenizer.from_pretrained(location, gguf_file=gguf_file)
            if gguf_file is not None
            else AutoTokenizer.from_pretrained(location)
        )
    except OSError as exc:
        raise ModelNotFound(
            "tokenizer", source.name, f"no tokenizer there (no downloads at run time): {exc}"
        ) from None
    return _Transformers(tokenizer)


class _Transformers:
    """A transformers tokenizer seen as a :class:`PromptTokenizer`.

    Its methods take batches and tensors too, so their declared results are unions; for the
    single texts and id lists the prompt encoder passes they are the narrow types, checked here.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self._tok = tokenizer

    @property
    def chat_template(self) -> str | None:
        template = self._tok.chat_template
        return template if isinstance(template, str) else None

    def encode(self, text: str, /, *, add_special_tokens: bool = True) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: list[int], /, *, skip_special_tokens: bool = False) -> str:
        text = self._tok.decode(ids, skip_special_tokens=skip_special_tokens)
        assert isinstance(text, str)
        return text

    def apply_chat_template(
        self,
        conversation: list[dict[str, str]],
        /,
        *,
        add_generation_prompt: bool = False,
        tokenize: Literal[False] = False,
    ) -> str:
        text = self._tok.apply_chat_template(
            conversation, add_generation_prompt=add_generation_prompt, tokenize=tokenize
        )
        assert isinstance(text, str)
        return text
