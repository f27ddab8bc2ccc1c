"""The proof the server backend may drop transformers: on the real tokenizer folders, the light
tokenizer gives exactly transformers' ids, texts and rendered chat templates.

Two folders: the embedded SmolLM2's converted cache folder (what ``URL#tokenizer=`` names in
the torch-free install) and the tiny test model's (``save_pretrained`` of that tokenizer).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from forethought.models._file_tokenizer import FileTokenizer
from forethought.models._model_load import LoadedModel
from forethought.models._model_source import gguf_cache_dir, resolve_model
from forethought.models._prompt import Prompt, PromptEncoder
from forethought.models._tokenizer import load_tokenizer
from forethought.policies import ActionForm, ActionSchema

pytestmark = [pytest.mark.model, pytest.mark.smollm2]

TEXTS = [
    "",
    " ",
    "hello world",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\n\n",
    '{"a":"go","s":1.25}',
    '{"action": "turn_left", "speed": 0.5, "reason": "obstacle at 0.4 m"}',
    "héllo wörld, 日本語, Ελληνικά, emoji 🤖🚀",
    "<|im_start|>user\nhi<|im_end|>",
    "Event: obstacle at 0.5 m\nAction: ",
]

CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": 'A test robot. Answer with JSON: {"a": "go"} é 🤖'},
        {"role": "user", "content": "obstacle at 0.5 m"},
    ],
    [
        {"role": "system", "content": ""},
        {"role": "user", "content": "\x00EVENT\x00"},
        {"role": "assistant", "content": '{"a":"stop"}'},
        {"role": "user", "content": "again"},
    ],
]


@pytest.fixture(scope="module")
def folders(
    smollm2_first_load: LoadedModel, model_cache: Path, tiny_model_dir: Path
) -> dict[str, Path]:
    gguf = Path(resolve_model("smollm2-135m").location)
    return {"smollm2": gguf_cache_dir(gguf, model_cache), "tiny": tiny_model_dir}


@pytest.mark.parametrize("name", ["smollm2", "tiny"])
def test_the_light_tokenizer_equals_transformers(folders: dict[str, Path], name: str) -> None:
    folder = folders[name]
    ours, theirs = FileTokenizer(folder), AutoTokenizer.from_pretrained(str(folder))
    assert ours.chat_template is not None
    assert ours.chat_template == theirs.chat_template
    for text in TEXTS:
        for special in (False, True):
            ids = ours.encode(text, add_special_tokens=special)
            assert ids == theirs.encode(text, add_special_tokens=special), (name, text)
            for skip in (False, True):
                assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(
                    ids, skip_special_tokens=skip
                ), (name, text, skip)
    # Special ids around text: both leave them out (or keep them) alike.
    specials = ours.encode("<|im_start|><|im_end|><|endoftext|>", add_special_tokens=False)
    assert len(specials) == 3
    mixed = specials[:1] + ours.encode("a b", add_special_tokens=False) + specials[1:]
    for skip in (False, True):
        assert ours.decode(mixed, skip_special_tokens=skip) == theirs.decode(
            mixed, skip_special_tokens=skip
        )
    assert ours.decode(mixed, skip_special_tokens=True) == "a b"
    for conversation in CONVERSATIONS:
        for prompt in (False, True):
            assert ours.apply_chat_template(
                conversation, add_generation_prompt=prompt
            ) == theirs.apply_chat_template(
                conversation, add_generation_prompt=prompt, tokenize=False
            ), (name, conversation, prompt)


def test_the_prompt_encoder_gives_the_same_ids_on_either_tokenizer(
    folders: dict[str, Path], robot_schema: ActionSchema
) -> None:
    folder = folders["smollm2"]
    source = resolve_model("smollm2-135m")
    loaded = load_tokenizer(source, cache_dir=folder.parents[1])
    assert isinstance(loaded, FileTokenizer)  # the server backend's tokenizer is the light one
    ours, theirs = PromptEncoder(loaded), PromptEncoder(AutoTokenizer.from_pretrained(str(folder)))
    prompt = Prompt('A robot in a warehouse.\n\nCurrent state: {"battery": 0.4}', "obstacle é")
    for form in ActionForm:
        assert ours.encode(prompt, robot_schema, form) == theirs.encode(prompt, robot_schema, form)
    action = '{"action":"turn_left","speed":0.5}'
    assert ours.encode_action(action) == theirs.encode_action(action)
    assert ours.decode(ours.encode_action(action)) == action
