"""The light tokenizer on a small hand-made tokenizer folder, against transformers' reading of it.

The folder is written here with the ``tokenizers`` library (a word-level vocabulary) and a chat
template that uses what real templates use: ``bos_token``, ``tojson``, ``namespace``, loop
controls, ``raise_exception`` and ``{% generation %}``. tests/model/test_tokenizer_equality.py holds
the same equality on the real models' folders.
"""

from __future__ import annotations

import json
from pathlib import Path

import jinja2.exceptions
import pytest
from extras import needs
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from forethought.models._file_tokenizer import FileTokenizer
from forethought.models._model_source import ModelSource
from forethought.models._tokenizer import load_tokenizer
from forethought.policies import ModelNotFound

TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(n=0) %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'tool' %}{% continue %}{% endif %}"
    "{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('bad role ' + m['role']) }}{% endif %}"
    "{% set ns.n = ns.n + 1 %}"
    "<{{ m['role'] }}>\n"
    "  {{ m['content'] }} {{ m | tojson }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}{% endgeneration %}"
    "{% endif %}"
    "{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<assistant n={{ ns.n }}>\n{% endif %}"
)

WORDS = ["hello", "world", "<s>", "</s>", "<unk>", "<pad>", "{", "}", '"', ":", "é", "日本"]


def write_folder(path: Path, *, template: str | None = TEMPLATE, jinja_file: bool = False) -> Path:
    """A tokenizer folder: tokenizer.json (word level), tokenizer_config.json, config.json."""
    path.mkdir(parents=True, exist_ok=True)
    vocab = {w: i for i, w in enumerate(WORDS)}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(path / "tokenizer.json"))
    config: dict[str, object] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        # The serialized AddedToken form some folders use.
        "eos_token": {"content": "</s>", "special": True, "__type": "AddedToken"},
        "unk_token": "<unk>",
        "pad_token": "<pad>",
    }
    if template is not None and not jinja_file:
        config["chat_template"] = template
    if template is not None and jinja_file:
        (path / "chat_template.jinja").write_text(template)
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    (path / "config.json").write_text("{}")  # what resolve_model asks of a model folder
    return path


MESSAGES = [
    {"role": "system", "content": 'Be brief. {"a": "é"} <b>&</b>'},
    {"role": "tool", "content": "skipped"},
    {"role": "user", "content": "hello 日本"},
    {"role": "assistant", "content": "world"},
    {"role": "user", "content": ""},
]

TEXTS = [
    "",
    "hello world",
    "  hello   world  ",
    "hello <s> world </s>",
    "日本 é unknown",
    '{ " : }',
]


@pytest.mark.parametrize("jinja_file", [False, True], ids=["config", "jinja-file"])
def test_the_light_tokenizer_equals_transformers_on_a_small_folder(
    tmp_path: Path, jinja_file: bool
) -> None:
    needs("transformers", "local")  # the reference it is compared with
    from transformers import AutoTokenizer

    folder = write_folder(tmp_path / "tok", jinja_file=jinja_file)
    ours, theirs = FileTokenizer(folder), AutoTokenizer.from_pretrained(str(folder))
    assert ours.chat_template == theirs.chat_template == TEMPLATE
    for generation_prompt in (False, True):
        rendered = ours.apply_chat_template(MESSAGES, add_generation_prompt=generation_prompt)
        assert rendered == theirs.apply_chat_template(
            MESSAGES, add_generation_prompt=generation_prompt, tokenize=False
        )
    # tojson keeps the non-ASCII and does not escape HTML; the tool message was skipped.
    assert '"content": "Be brief. {\\"a\\": \\"é\\"} <b>&</b>"' in rendered
    assert rendered.startswith("<s><system>\n")
    assert rendered.endswith("<assistant n=4>\n")
    for text in TEXTS:
        for special in (False, True):
            ids = ours.encode(text, add_special_tokens=special)
            assert ids == theirs.encode(text, add_special_tokens=special), text
            for skip in (False, True):
                assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(
                    ids, skip_special_tokens=skip
                ), (text, skip)
    # The named special tokens are special: decode leaves them out when asked.
    assert ours.decode(ours.encode("hello <s> world </s>"), skip_special_tokens=True) == (
        "hello world"
    )


def test_a_template_refusal_and_a_sandbox_escape_raise(tmp_path: Path) -> None:
    ours = FileTokenizer(write_folder(tmp_path / "tok"))
    with pytest.raises(jinja2.exceptions.TemplateError, match="bad role robot"):
        ours.apply_chat_template([{"role": "robot", "content": "x"}])
    escape = "{% set ns = namespace() %}{% set ns._x = 1 %}{{ ns._x }}"
    sneaky = FileTokenizer(write_folder(tmp_path / "sneaky", template=escape))
    with pytest.raises(jinja2.exceptions.SecurityError):
        sneaky.apply_chat_template([{"role": "user", "content": "x"}])
    # The sandbox is immutable: a template cannot change the messages it is given.
    mutate = "{% set _ = messages.append(1) %}{{ messages | length }}"
    immutable = FileTokenizer(write_folder(tmp_path / "immutable", template=mutate))
    with pytest.raises(jinja2.exceptions.SecurityError):
        immutable.apply_chat_template([{"role": "user", "content": "x"}])


def test_a_folder_without_a_template_has_none(tmp_path: Path) -> None:
    ours = FileTokenizer(write_folder(tmp_path / "tok", template=None))
    assert ours.chat_template is None
    with pytest.raises(ValueError, match="no chat template"):
        ours.apply_chat_template([{"role": "user", "content": "x"}])


def test_load_tokenizer_reads_a_folder_with_the_light_tokenizer(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "tok")
    tok = load_tokenizer(ModelSource(str(folder), str(folder), "dir"))
    assert isinstance(tok, FileTokenizer)
    assert tok.encode("hello world", add_special_tokens=False) == [0, 1]


def test_a_broken_tokenizer_folder_is_model_not_found(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "tok")
    (folder / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelNotFound, match="unreadable tokenizer"):
        load_tokenizer(ModelSource(str(folder), str(folder), "dir"))
