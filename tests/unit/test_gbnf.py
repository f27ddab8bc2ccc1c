"""The GBNF a llama.cpp server decodes under admits a number only within its schema's range.

Each grammar is read by llguidance's GBNF reader over a byte-level vocabulary, so the test
asks the grammar itself which texts it admits: every candidate text is admitted exactly when
it is a JSON number within the range with at most the allowed decimals. Under the old grammar,
which bounded only the count of digits, ``{"speed":2}`` passed where the maximum is 1.5, and
greedy decoding wrote it again on every retry.
"""

from __future__ import annotations

import itertools
import re
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import pytest

llguidance = pytest.importorskip(
    "llguidance", reason="needs the local extra: pip install 'forethought[local]'"
)
import orjson  # noqa: E402
from llguidance.gbnf_to_lark import gbnf_to_lark  # noqa: E402

from forethought.models.grammar._bounds import OutputBounds  # noqa: E402
from forethought.models.grammar._gbnf import action_gbnf, action_opening  # noqa: E402
from forethought.policies import ActionForm, SchemaError  # noqa: E402
from forethought.sims import load_scenario  # noqa: E402

_EOS = 256


class _Bytes:
    """A vocabulary of the 256 bytes and an end token: every text has one spelling."""

    eos_token_id = _EOS
    bos_token_id = None
    tokens: ClassVar[list[bytes]] = [bytes([b]) for b in range(256)] + [b"<eos>"]
    special_token_ids: ClassVar[list[int]] = [_EOS]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


@pytest.fixture(scope="module")
def byte_tokenizer() -> llguidance.LLTokenizer:
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


class _Admits:
    """Whether one GBNF grammar admits a text, whole."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, gbnf: str) -> None:
        self._tok = tokenizer
        self._grammar = llguidance.LLMatcher.grammar_from_lark(gbnf_to_lark(gbnf))
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            self._grammar, tokenizer
        )
        assert not is_error, messages
        self._m = llguidance.LLMatcher(tokenizer, self._grammar, log_level=0)

    def __call__(self, text: str) -> bool:
        tokens = list(text.encode())
        self._m.reset()
        # try_consume_tokens stops at the first token the grammar forbids without entering
        # the error state, so one matcher serves every text.
        whole = self._m.try_consume_tokens(tokens) == len(tokens)
        assert not self._m.is_error(), self._m.get_error()
        return whole and self._m.is_accepting()


_JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")


def _in_range(text: str, schema: dict[str, Any], decimals: int) -> bool:
    """The oracle: a JSON number, no exponent, no negative zero, within decimals and range."""
    if not _JSON_NUMBER.fullmatch(text):
        return False
    whole, _, frac = text.lstrip("-").partition(".")
    if len(frac) > decimals or len(whole) > OutputBounds().integer_digits:
        return False
    value = Decimal(text)
    if text.startswith("-") and value == 0:
        return False
    checks = {
        "minimum": lambda b: value >= b,
        "maximum": lambda b: value <= b,
        "exclusiveMinimum": lambda b: value > b,
        "exclusiveMaximum": lambda b: value < b,
    }
    return all(check(Decimal(str(schema[k]))) for k, check in checks.items() if k in schema)


def _candidates(low: int, high: int, decimals: int) -> list[str]:
    """Numbers of ``low..high`` with every fraction of up to decimals + 1 digits, both signs,
    and the malformed spellings a model might try."""
    fractions = [""] + [
        "." + "".join(d)
        for n in range(1, decimals + 2)
        for d in itertools.product("0149", repeat=n)
    ]
    texts = [f"{i}{f}" for i in range(low, high + 1) for f in fractions]
    texts += [f"-{i}{f}" for i in range(max(-low, 0) + 1) for f in fractions]
    texts += ["-0", "-0.0", "00", "01", "-01", "1.", ".5", "1e0", "+1", "1.5e-1", "--1", ""]
    return texts


CASES: list[tuple[dict[str, Any], int]] = [
    # The README example's action: speed in 0..1.5 (the model wrote 2, then 2 again).
    ({"type": "number", "minimum": 0, "maximum": 1.5}, 3),
    ({"type": "integer", "minimum": 0, "maximum": 125}, 0),
    ({"type": "integer", "minimum": -40, "maximum": 12}, 0),
    ({"type": "integer", "minimum": -30, "maximum": -7}, 0),
    ({"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 40}, 0),
    ({"type": "integer", "minimum": 0.5, "maximum": 9.5}, 0),  # integer bounds round inward
    ({"type": "number", "minimum": -2.25, "maximum": 3.125}, 3),
    ({"type": "number", "minimum": -1.5, "maximum": -0.05}, 3),
    ({"type": "number", "exclusiveMinimum": -0.5, "exclusiveMaximum": 0.5}, 3),
    ({"type": "number", "minimum": 0.1, "maximum": 0.9, "x-decimals": 1}, 1),
    ({"type": "number", "minimum": 0, "maximum": 20, "multipleOf": 0.01}, 2),
]


@pytest.mark.parametrize(("schema", "decimals"), CASES, ids=[str(c[0]) for c in CASES])
def test_a_number_is_admitted_exactly_when_it_is_in_range(
    byte_tokenizer: llguidance.LLTokenizer, schema: dict[str, Any], decimals: int
) -> None:
    admits = _Admits(byte_tokenizer, action_gbnf(schema))
    ends = [int(Decimal(str(schema[k]))) for k in schema if "imum" in k]
    texts = _candidates(min(ends) - 3, max(ends) + 3, decimals)
    verdicts = {t: admits(t) for t in texts}
    wrong = [t for t, ok in verdicts.items() if ok != _in_range(t, schema, decimals)]
    assert not wrong, wrong[:20]
    assert sum(verdicts.values()) >= 3  # agreement on more than an empty language


def test_the_readme_action_admits_no_speed_past_its_maximum(
    byte_tokenizer: llguidance.LLTokenizer,
) -> None:
    action = {
        "type": "object",
        "properties": {
            "a": {"enum": ["stop", "slow_down"]},
            "s": {"type": "number", "minimum": 0, "maximum": 1.5},
        },
        "required": ["a", "s"],
        "additionalProperties": False,
    }
    admits = _Admits(byte_tokenizer, action_gbnf(action))
    assert admits('{"a":"stop","s":0}')
    assert admits('{"a":"slow_down","s":1.5}')
    assert admits('{"a":"slow_down","s":0.25}')
    for text in ('{"a":"stop","s":2}', '{"a":"stop","s":1.6}', '{"a":"stop","s":1.501}'):
        assert not admits(text), text


def test_an_unbounded_number_keeps_the_digit_bounds(byte_tokenizer: llguidance.LLTokenizer) -> None:
    b = OutputBounds()
    admits = _Admits(byte_tokenizer, action_gbnf({"type": "number"}, b))
    assert admits("9" * b.integer_digits + "." + "9" * b.decimals)
    assert admits("-" + "9" * b.integer_digits)
    assert admits("0.5")
    assert not admits("1" + "0" * b.integer_digits)  # one integer digit too many
    assert not admits("0." + "5" * (b.decimals + 1))
    assert not admits("-0")
    ints = _Admits(byte_tokenizer, action_gbnf({"type": "integer"}, b))
    assert ints("-" + "9" * b.integer_digits)
    assert not ints("1.0")


def test_a_range_with_no_value_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="lies in this range"):
        action_gbnf({"type": "integer", "minimum": 0.2, "maximum": 0.8})
    with pytest.raises(SchemaError, match="lies in this range"):
        action_gbnf({"type": "number", "minimum": 0.0001, "maximum": 0.0009})


def _compact_of(text: str, schema: dict[str, Any]) -> bool:
    """The oracle: ``text`` is a compact JSON value (no spaces, keys in order) of ``schema``."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    if orjson.dumps(value).decode() != text:
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(value)


_OPENED: list[tuple[dict[str, Any], list[str], str]] = [
    # (schema, actions it admits, its opening)
    (
        {
            "type": "object",
            "properties": {
                "a": {"enum": ["stop", "slow_down"]},
                "s": {"type": "number", "minimum": 0, "maximum": 1.5},
            },
            "required": ["a", "s"],
        },
        ['{"a":"stop","s":0}', '{"a":"slow_down","s":1.25}'],
        '{"a":"s',  # both values start with an s
    ),
    (
        {"type": "object", "properties": {"x": {"enum": [1, 12]}}, "required": ["x"]},
        ['{"x":1}', '{"x":12}'],
        '{"x":1',  # one value is a prefix of the other: the rest may be empty
    ),
    (
        {
            "type": "object",
            "properties": {"n": {"type": "string", "maxLength": 3}, "c": {"const": True}},
            "required": ["n"],
        },
        ['{"n":""}', '{"n":"abc","c":true}'],
        '{"n":"',
    ),
    (
        {
            "type": "object",
            "properties": {"o": {"type": "boolean"}, "r": {"enum": ["go"]}},
            "required": ["r"],
        },
        ['{"r":"go"}', '{"o":true,"r":"go"}'],
        "{",  # an optional first property: only the brace is sure
    ),
    ({"enum": ["left", "light"]}, ['"left"', '"light"'], '"l'),
    ({"type": "object", "properties": {}}, ["{}"], "{"),
    (
        {
            "type": "object",
            "properties": {"k": {"const": "v"}, "n": {"type": "integer", "minimum": 0}},
            "required": ["k"],
        },
        ['{"k":"v"}', '{"k":"v","n":3}'],
        '{"k":"v"',  # a const is all opening: nothing of it left to write
    ),
    ({"type": "number", "minimum": 0, "maximum": 2}, ["0", "1.5"], ""),
]


@pytest.mark.parametrize(("schema", "actions", "opening"), _OPENED, ids=[o for *_, o in _OPENED])
def test_the_grammar_after_its_opening_admits_exactly_the_rest_of_each_action(
    byte_tokenizer: llguidance.LLTokenizer, schema: dict[str, Any], actions: list[str], opening: str
) -> None:
    """A server is sent an action's opening with the prompt and decodes the rest under the
    grammar that ``skip`` writes: for every cut inside the opening, exactly the rests of the
    schema's actions are admitted, not the whole actions and not a rest cut one too far."""
    assert action_opening(schema).text == opening
    for skip in range(len(opening) + 1):
        admits = _Admits(byte_tokenizer, action_gbnf(schema, skip=skip))
        for action in actions:
            assert action.startswith(opening)
            assert admits(action[skip:]), (skip, action)
            if skip:
                assert not admits(action), (skip, action)
            if skip < len(action):  # a character dropped: admitted only if that is an action
                shorter = action[:skip] + action[skip + 1 :]
                assert admits(action[skip + 1 :]) == _compact_of(shorter, schema), (skip, action)
    with pytest.raises(ValueError, match="outside the opening"):
        action_gbnf(schema, skip=len(opening) + 1)


def test_an_any_of_schema_has_no_opening() -> None:
    """Each option of an ``anyOf`` may replace the properties, so none of them is sure."""
    schema = {
        "type": "object",
        "properties": {"a": {"enum": ["x"]}},
        "required": ["a"],
        "anyOf": [{"properties": {"b": {"const": 1}}, "required": ["b"]}],
    }
    assert action_opening(schema).text == ""
    assert action_gbnf(schema, skip=0) == action_gbnf(schema)


def test_every_shipped_scenario_opens_with_its_first_key() -> None:
    """The scenarios' actions all start with a required enum: their opening is its key and
    the value's quote, which a server is sent with the prompt instead of decoding it."""
    scenarios = sorted((Path(__file__).parents[2] / "sims" / "scenarios").glob("*.yaml"))
    assert len(scenarios) >= 8
    for path in scenarios:
        schema = load_scenario(path).spec.action_schema()
        compact = schema.json_schema(ActionForm.COMPACT)
        default = schema.compact(schema.validate(load_scenario(path).spec.default_action))
        opening = action_opening(compact)
        first = next(iter(compact["properties"]))
        assert opening.text == '{"' + first + '":"', path.name
        assert default.startswith(opening.text)
        # The ways on are the enum's values, one of which the default action writes.
        assert any(default[len(opening.text) :].startswith(w) for w in opening.ways_on)
