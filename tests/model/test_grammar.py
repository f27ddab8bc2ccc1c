"""Constrained decoding: every completed output validates, on random weights, both grammars."""

from __future__ import annotations

import time

import pytest

from forethought.models import GenerationStatus, TransformersBackend
from forethought.models.grammar._compilers import make_grammar_compiler
from forethought.policies import ActionSchema, SchemaError

pytestmark = pytest.mark.model

SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {"enum": ["stop", "go", "turn_left"]}},
        "required": ["a"],
    },
    {
        "type": "object",
        "properties": {
            "mode": {"enum": ["idle", "patrol", "return"]},
            "altitude_m": {"type": "number", "minimum": 2, "maximum": 120},
            "hover": {"type": "boolean"},
        },
        "required": ["mode", "altitude_m"],
    },
    {
        "type": "object",
        "properties": {
            "say": {"type": "string", "minLength": 1, "maxLength": 12},
            "priority": {"type": "integer", "minimum": 0, "maximum": 9},
        },
        "required": ["say", "priority"],
    },
    {
        "type": "object",
        "properties": {
            "target": {
                "type": "object",
                "properties": {
                    "x": {"type": "integer", "minimum": 0, "maximum": 20},
                    "y": {"type": "integer", "minimum": 0, "maximum": 20},
                },
                "required": ["x", "y"],
            },
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        },
        "required": ["target"],
    },
]
EVENTS = [
    "obstacle at 0.4 m",
    "low battery",
    "visitor asks for the exit",
    "wind gust 12 m/s",
    "",
    "ÜñïçødÉ \u2603 event",
    '{"json": "inside"}',
    "x" * 40,
]


@pytest.mark.parametrize("grammar", ["llguidance", "xgrammar"])
def test_every_completed_output_validates(tiny_model_dir, grammar: str) -> None:
    backend = TransformersBackend(
        model=str(tiny_model_dir), device="cpu", dtype="float32", grammar=grammar
    )
    backend.load(warm_up=False)
    counts = dict.fromkeys(GenerationStatus, 0)
    for i, raw in enumerate(SCHEMAS):
        schema = ActionSchema.from_json_schema(raw)
        backend.prepare_sync(schema)
        gens = backend.generate_sync(
            f"Context {i}.", EVENTS, schema, deadline=time.monotonic() + 120, max_new_tokens=48
        )
        for g in gens:
            counts[g.status] += 1
            if g.ok:
                assert g.action is not None
                assert schema.parse(g.text) == g.action
                assert schema.validate(schema.readable(g.action)) == g.action
    assert counts[GenerationStatus.INVALID] == 0
    assert counts[GenerationStatus.DONE] >= len(SCHEMAS) * len(EVENTS) // 2
    assert backend.grammar_compiler.compiles == len(SCHEMAS)  # type: ignore[attr-defined]


def test_grammar_is_compiled_once_per_schema(
    tiny_backend: TransformersBackend, robot_schema: ActionSchema
) -> None:
    compiler = tiny_backend.grammar_compiler
    before = compiler.compiles  # type: ignore[attr-defined]
    tiny_backend.prepare_sync(robot_schema)
    for e in ("a", "b", "c"):
        tiny_backend.generate_sync("ctx", [e], robot_schema, deadline=time.monotonic() + 60)
    assert compiler.compiles - before <= 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("grammar", ["llguidance", "xgrammar"])
def test_schema_that_cannot_compile_is_a_schema_error(
    tiny_backend: TransformersBackend, grammar: str
) -> None:
    tok = tiny_backend.loaded.tokenizer
    compiler = make_grammar_compiler(grammar, tok, tiny_backend.loaded.model.config.vocab_size)
    with pytest.raises(SchemaError):
        compiler.compile(
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "(unclosed"}}}
        )
