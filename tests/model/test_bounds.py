"""Bounded outputs (issue 14): no number, string or array can run on under either grammar, and
a batch is never held by a row that would."""

from __future__ import annotations

import time
from typing import Any

import pytest

from forethought.models import GenerationStatus, TransformersBackend
from forethought.models.grammar._bounds import OutputBounds, bounded_schema, max_output_chars
from forethought.models.grammar._compilers import make_grammar_compiler
from forethought.policies import ActionSchema

pytestmark = pytest.mark.model

# Nothing bounded as written: a free number, integer, string and array.
FREE = {
    "type": "object",
    "properties": {
        "a": {"enum": ["stop", "go"]},
        "x": {"type": "number"},
        "n": {"type": "integer"},
        "say": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}},
    },
    "required": ["a", "x", "n", "say", "tags"],
    "additionalProperties": False,
}


def test_bounded_schema_adds_only_what_is_missing() -> None:
    b = OutputBounds()
    out = bounded_schema(FREE, b)
    props = out["properties"]
    assert props["x"] == {
        "type": "number",
        "minimum": -b.largest(),
        "maximum": b.largest(),
        "multipleOf": 0.001,
    }
    assert props["n"] == {"type": "integer", "minimum": -b.largest(), "maximum": b.largest()}
    assert props["say"]["maxLength"] == 64
    assert props["tags"]["maxItems"] == 16
    assert props["tags"]["items"] == FREE["properties"]["tags"]["items"]  # already bounded
    assert props["a"] == {"enum": ["stop", "go"]}
    # What the schema says wins; x-decimals sets the precision.
    own = {"type": "number", "minimum": 0, "maximum": 2, "x-decimals": 1}
    assert bounded_schema(own)["multipleOf"] == 0.1
    assert bounded_schema({"type": "string", "minLength": 100})["maxLength"] == 164
    assert bounded_schema({"type": "array", "minItems": 3})["maxItems"] == 19
    assert "multipleOf" not in bounded_schema({"type": "number"}, precision=False)
    # The longest text: every part counted (sign, 12 digits, point, 3 decimals, ...).
    size = max_output_chars(out, b)
    assert size is not None
    assert 200 < size < 800
    assert max_output_chars({"type": "object", "properties": {"v": {}}}) is None


def _accepts(compiler: Any, compiled: object, tokenizer: Any, text: str) -> bool:
    m = compiler.matcher(compiled)
    ids = tokenizer.encode(text, add_special_tokens=False)
    return all(m.accept(t) for t in ids) and m.done


@pytest.mark.parametrize("grammar", ["llguidance", "xgrammar"])
def test_a_runaway_value_is_impossible(tiny_backend: TransformersBackend, grammar: str) -> None:
    tok = tiny_backend.loaded.tokenizer
    compiler = make_grammar_compiler(grammar, tok, tiny_backend.loaded.model.config.vocab_size)
    compiled = compiler.compile(FREE)
    decimals = 3 if grammar == "llguidance" else 6

    def text(**kw: str) -> str:
        parts = {"a": '"go"', "x": "0.5", "n": "7", "say": '"hi"', "tags": "[1,2]", **kw}
        return "{" + ",".join(f'"{k}":{v}' for k, v in parts.items()) + "}"

    assert _accepts(compiler, compiled, tok, text())
    assert _accepts(compiler, compiled, tok, text(x="-123.5", n="999999999999"))
    assert _accepts(compiler, compiled, tok, text(x="0." + "1" * decimals))
    for runaway in (
        text(x="0." + "5" * (decimals + 1)),  # one digit more than the bound
        text(x="0.5575755555555557575555"),  # the number seen on the H200 (issue 14)
        text(x="1e5"),  # no exponent
        text(x="1234567890123"),  # 13 integer digits
        text(n="1000000000000"),
        text(say='"' + "a" * 65 + '"'),  # past the default string bound
        text(tags="[" + ",".join("1" * 17) + "]"),  # past the default array bound
    ):
        assert not _accepts(compiler, compiled, tok, runaway), runaway


@pytest.mark.parametrize("grammar", ["llguidance", "xgrammar"])
def test_a_runaway_row_does_not_hold_the_batch(tiny_model_dir: Any, grammar: str) -> None:
    """However many tokens a caller allows, no row can take more than the bounded grammar
    spells: every row of a batch finishes, within the bound, so the batch returns then."""
    backend = TransformersBackend(
        model=str(tiny_model_dir), device="cpu", dtype="float32", grammar=grammar
    )
    backend.load(warm_up=False)
    # The number and the integer free; the string and array short enough that the longest
    # possible action fits the tiny model's 512-token context.
    props = {
        **FREE["properties"],
        "say": {"type": "string", "maxLength": 16},
        "tags": {**FREE["properties"]["tags"], "maxItems": 4},
    }
    schema = ActionSchema.from_json_schema({**FREE, "properties": props})
    cap = backend.max_output_tokens(schema)
    events = [f"event {i}: {'x' * i}" for i in range(8)]
    gens = backend.generate_sync(
        "ctx", events, schema, deadline=time.monotonic() + 600, max_new_tokens=5000
    )
    assert cap < 300
    for g in gens:
        assert g.output_tokens <= cap
        assert g.status is GenerationStatus.DONE, (g.status, g.text)
        assert g.ok
