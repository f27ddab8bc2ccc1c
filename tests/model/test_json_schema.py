"""Action schemas with JSON Schema's exact meaning (issue 16), written from the specification
(draft 2020-12): every keyword's verdict, loud refusals, and a property test against
``jsonschema`` through the whole action path (container model, aliases, compact form)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought.models import ScriptedBackend, TransformersBackend
from forethought.planner import PlannerConfig
from forethought.policies import (
    ActionSchema,
    AgentSpec,
    ConfigError,
    EventKey,
    InvalidAction,
    PolicyNode,
    PolicyTree,
    SchemaError,
)
from forethought.runtime import Agent, AgentConfig


def nested(prop: Any, **extra: Any) -> ActionSchema:
    """The action ``{"v": <prop>}`` with ``v`` required."""
    return ActionSchema.from_json_schema(
        {"type": "object", "properties": {"v": prop}, "required": ["v"], **extra}
    )


def verdict(schema: ActionSchema, instance: Any) -> bool:
    try:
        schema.validate({"v": instance})
    except InvalidAction:
        return False
    return True


# -- the issue's table: every row gives JSON Schema's answer ------------------------------------

TABLE = [
    ({"type": "number", "multipleOf": 0.5}, 0.3, False),
    ({"type": "number", "multipleOf": 0.5}, 1.5, True),
    ({"type": "integer", "not": {"const": 3}}, 3, False),
    ({"type": "integer", "not": {"const": 3}}, 4, True),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [1, 1], False),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [1, 2], True),
    (
        {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 10}]},
        5,
        False,
    ),
    (
        {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 10}]},
        11,
        True,
    ),
    ({"type": "string", "format": "email"}, "nope", False),
    ({"type": "string", "format": "email"}, "a@b.org", True),
    ({"type": "object", "minProperties": 1}, {}, False),
    ({"type": "object", "minProperties": 1}, {"x": 1}, True),
    ({"enum": [True]}, 1, False),
    ({"enum": [True]}, True, True),
    ({"const": False}, 0, False),
    ({"const": False}, False, True),
    ({"enum": [1]}, True, False),
    ({"type": ["integer", "null"]}, None, True),
    ({"type": ["integer", "null"]}, "x", False),
    ({"type": "integer"}, 1.0, True),
    ({"type": "integer"}, 1.5, False),
]


@pytest.mark.parametrize(("prop", "instance", "valid"), TABLE)
def test_each_row_gives_json_schemas_answer(prop: Any, instance: Any, valid: bool) -> None:
    assert verdict(nested(prop), instance) is valid


# -- every supported keyword, from the specification --------------------------------------------

KEYWORDS = [
    ("allOf", {"allOf": [{"minimum": 2}, {"maximum": 4}]}, [3], [1, 5]),
    ("anyOf", {"anyOf": [{"type": "string"}, {"minimum": 2}]}, ["a", 3], [1]),
    ("not", {"not": {"type": "string"}}, [1, None], ["s"]),
    (
        "if/then/else",
        {"if": {"minimum": 10}, "then": {"multipleOf": 5}, "else": {"maximum": 3}},
        [15, 2],
        [12, 5],
    ),
    ("exclusiveMinimum", {"exclusiveMinimum": 1}, [1.1], [1]),
    ("exclusiveMaximum", {"exclusiveMaximum": 1}, [0.9], [1]),
    ("minLength counts code points", {"type": "string", "minLength": 2}, ["\U0001f600a"], ["a"]),
    ("pattern is not anchored", {"type": "string", "pattern": "b"}, ["abc"], ["ac"]),
    ("prefixItems", {"prefixItems": [{"type": "string"}], "items": False}, [["a"]], [["a", 1]]),
    ("contains", {"contains": {"const": 2}, "minContains": 2}, [[2, 2]], [[2, 1]]),
    ("maxProperties", {"type": "object", "maxProperties": 1}, [{"a": 1}], [{"a": 1, "b": 2}]),
    (
        "dependentRequired",
        {"type": "object", "dependentRequired": {"a": ["b"]}},
        [{"a": 1, "b": 2}, {"b": 1}],
        [{"a": 1}],
    ),
    (
        "additionalProperties",
        {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
        [{"a": 1}],
        [{"b": 1}],
    ),
    ("boolean schema false", False, [], [0, None]),
    ("const compares JSON values", {"const": {"a": [1, 2.0]}}, [{"a": [1.0, 2]}], [{"a": [2, 1]}]),
    ("uniqueItems: 1 and 1.0 are equal", {"uniqueItems": True}, [[1, True]], [[1, 1.0]]),
]


@pytest.mark.parametrize(
    ("prop", "good", "bad"),
    [pytest.param(p, g, b, id=name) for name, p, g, b in KEYWORDS],
)
def test_keyword_semantics(prop: Any, good: list[Any], bad: list[Any]) -> None:
    schema = nested(prop)
    for instance in good:
        assert verdict(schema, instance), instance
    for instance in bad:
        assert not verdict(schema, instance), instance


def test_local_ref_and_defs_and_recursion() -> None:
    schema = ActionSchema.from_json_schema(
        {
            "type": "object",
            "$defs": {
                "pos": {"type": "integer", "minimum": 0},
                "tree": {
                    "type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}},
                    "additionalProperties": False,
                },
            },
            "properties": {"n": {"$ref": "#/$defs/pos"}, "t": {"$ref": "#/$defs/tree"}},
            "required": ["n"],
        }
    )
    assert schema.readable(schema.validate({"n": 2})) == {"n": 2}
    with pytest.raises(InvalidAction, match="minimum"):
        schema.validate({"n": -1})
    schema.validate({"n": 1, "t": {"kids": [{"kids": []}]}})
    with pytest.raises(InvalidAction):
        schema.validate({"n": 1, "t": {"kids": [{"bad": 1}]}})


def test_explicit_null_is_kept_and_absent_optional_is_omitted() -> None:
    schema = ActionSchema.from_json_schema(
        {
            "type": "object",
            "properties": {"v": {"type": ["integer", "null"]}, "w": {"type": "integer"}},
            "required": ["v"],
        }
    )
    assert schema.readable(schema.validate({"v": None})) == {"v": None}
    assert schema.parse(schema.compact(schema.validate({"v": None, "w": 3}))).model_dump(
        by_alias=True, exclude_unset=True
    ) == {"v": None, "w": 3}


def test_enumerate_keeps_only_valid_combinations() -> None:
    schema = ActionSchema.from_json_schema(
        {
            "type": "object",
            "properties": {"a": {"enum": ["go", "stop"]}, "fast": {"type": "boolean"}},
            "required": ["a", "fast"],
            "not": {"properties": {"a": {"const": "stop"}, "fast": {"const": True}}},
        }
    )
    got = [schema.readable(c) for c in schema.enumerate(16) or []]
    assert {"a": "stop", "fast": True} not in got
    assert len(got) == 3


# -- loud refusal --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prop", "where"),
    [
        ({"$dynamicRef": "#meta"}, "action.properties.v.$dynamicRef"),
        ({"$ref": "https://example.com/s.json"}, "action.properties.v.$ref"),
        ({"$ref": "#/$defs/missing"}, "action.properties.v.$ref"),
        ({"$id": "http://x/y", "type": "integer"}, "action.properties.v.$id"),
        ({"type": "string", "format": "uri"}, "action.properties.v.format"),
        ({"contentMediaType": "application/json"}, "action.properties.v.contentMediaType"),
        ({"anyOf": [{"format": "hostname"}]}, "action.properties.v.anyOf[0].format"),
        ({"type": "bogus"}, "action.properties.v.type"),
        ({"enum": []}, "action.properties.v.enum"),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_keyword_and_path(prop: Any, where: str) -> None:
    with pytest.raises(SchemaError) as info:
        nested(prop)
    assert info.value.field == where


def test_spec_refuses_a_default_the_schema_forbids() -> None:
    data = {
        "name": "n",
        "description": "d",
        "action": {
            "type": "object",
            "properties": {"v": {"type": "integer", "multipleOf": 2}},
            "required": ["v"],
        },
        "default_action": {"v": 3},
        "events": [{"type": "e", "deadline_ms": 100}],
    }
    with pytest.raises(ConfigError, match="multiple of 2"):
        AgentSpec.from_data(data)
    data["default_action"] = {"v": 2}
    data["candidates"] = [{"v": 4}, {"v": True}]
    with pytest.raises(ConfigError, match=r"candidates\[1\]"):
        AgentSpec.from_data(data)


# -- the property test: our verdict is jsonschema's, through the whole action path --------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([0.5, 1.0, 2.5, -1.5]),
    st.sampled_from(["", "a", "ab", "a@b.org"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
    ),
    max_leaves=6,
)
TYPES = st.sampled_from(["integer", "number", "string", "boolean", "null", "array", "object"])


def leaf_schemas() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda t: {"type": t}, TYPES),
        st.builds(lambda ts: {"type": sorted(set(ts))}, st.lists(TYPES, min_size=1, max_size=3)),
        st.builds(lambda v: {"const": v}, SCALARS),
        st.builds(lambda vs: {"enum": vs}, st.lists(SCALARS, min_size=1, max_size=3)),
        st.builds(lambda m: {"multipleOf": m}, st.sampled_from([0.5, 2, 3])),
        st.builds(lambda n: {"minimum": n}, st.integers(-3, 3)),
        st.builds(lambda n: {"exclusiveMaximum": n}, st.integers(-3, 3)),
        st.builds(lambda n: {"maxLength": n}, st.integers(0, 2)),
        st.builds(lambda n: {"minItems": n}, st.integers(0, 2)),
        st.just({"uniqueItems": True}),
        st.builds(lambda n: {"minProperties": n}, st.integers(0, 2)),
        st.just({"dependentRequired": {"a": ["b"]}}),
        st.just({"format": "email"}),
    )


SCHEMAS = st.recursive(
    leaf_schemas(),
    lambda inner: st.one_of(
        st.builds(lambda xs: {"allOf": xs}, st.lists(inner, min_size=1, max_size=2)),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, min_size=1, max_size=2)),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(inner, min_size=1, max_size=2)),
        st.builds(lambda x: {"not": x}, inner),
        st.builds(lambda a, b: {"if": a, "then": b}, inner, inner),
        st.builds(lambda x: {"items": x}, inner),
        st.builds(lambda xs: {"prefixItems": xs}, st.lists(inner, min_size=1, max_size=2)),
        st.builds(lambda x: {"type": "object", "properties": {"a": x}}, inner),
    ),
    max_leaves=4,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prop=SCHEMAS, instance=VALUES)
def test_our_verdict_is_jsonschemas(prop: dict[str, Any], instance: Any) -> None:
    action = {"type": "object", "properties": {"v": prop}, "required": ["v"]}
    expected = jsonschema.Draft202012Validator(
        action, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).is_valid({"v": instance})
    schema = ActionSchema.from_json_schema(action)
    assert verdict(schema, instance) is expected
    if expected:  # the compact form and back never changes the action or its verdict
        back = schema.parse(schema.compact(schema.validate({"v": instance})))
        assert orjson.dumps(schema.readable(back)) == orjson.dumps({"v": instance})


# -- the tree and the hot path -------------------------------------------------------------------


async def test_snapshot_nodes_the_schema_forbids_are_refused_on_load(tmp_path: Path) -> None:
    action = {
        "type": "object",
        "properties": {"v": {"type": "integer", "multipleOf": 2}},
        "required": ["v"],
    }
    spec = AgentSpec.from_data(
        {
            "name": "n",
            "description": "d",
            "action": action,
            "default_action": {"v": 0},
            "events": [{"type": "e", "params": {"k": [1, 2]}, "deadline_ms": 100}],
        }
    )
    snap = tmp_path / "tree.json"
    fp = spec.initial_state().fingerprint
    raw = PolicyTree()  # a tree written by someone else, without the check
    for k, v in ((1, 4), (2, 3)):
        raw.insert(
            PolicyNode(fp, EventKey("e", (("k", k),)), {"v": v}, "", 0.5, "scripted", 1, 0, 0)
        )
    raw.save(snap, schema=spec.action_schema().fingerprint, model_id="scripted")
    config = AgentConfig.defaults(snapshot=snap, planner=PlannerConfig(enabled=False))
    async with Agent(spec, backend=ScriptedBackend(), config=config) as agent:
        assert len(agent.tree) == 1
        assert agent.snapshot_rejected == 1
        with pytest.raises(InvalidAction):
            agent.tree.insert(
                PolicyNode(fp, EventKey("e", (("k", 2),)), {"v": 5}, "", 0.5, "m", 1, 0, 0)
            )


@pytest.mark.model
async def test_grammar_relaxes_what_it_cannot_enforce_and_nothing_invalid_passes(
    running_tiny: TransformersBackend,
) -> None:
    schema = nested(
        {"type": "integer", "minimum": 0, "maximum": 99, "multipleOf": 7, "not": {"const": 14}}
    )
    assert "multipleOf" not in str(schema.json_schema())  # the grammar gets the relaxed form
    await running_tiny.prepare(schema)
    gens = await running_tiny.generate(
        "You pick a number.", [f"event {i}" for i in range(8)], schema, deadline=math.inf
    )
    for g in gens:
        if g.action is not None:
            v = schema.readable(g.action)["v"]
            assert v % 7 == 0
            assert v != 14
        else:
            assert g.status.value in ("invalid", "deadline", "cut")
