import orjson
import pytest
from pydantic import BaseModel, Field

from forethought.policies import ActionForm, ActionSchema, InvalidAction, SchemaError


def test_compact_aliases_are_derived_and_unique(robot_schema: ActionSchema) -> None:
    assert robot_schema.aliases == {"action": "a", "speed": "s"}
    compact = robot_schema.json_schema()
    assert set(compact["properties"]) == {"a", "s"}
    assert compact["required"] == ["a"]
    assert compact["additionalProperties"] is False


def test_colliding_names_get_distinct_aliases() -> None:
    schema = ActionSchema.from_json_schema(
        {
            "type": "object",
            "properties": {
                "speed": {"type": "number"},
                "steer": {"type": "number"},
                "stop_distance": {"type": "number"},
                "s": {"type": "boolean"},
            },
            "required": ["speed"],
        }
    )
    aliases = schema.aliases
    assert len(set(aliases.values())) == 4
    assert aliases["speed"] == "s" or aliases["s"] == "s"
    assert aliases["stop_distance"] in ("sd", "st", "sto")


def test_declared_compact_alias_wins() -> None:
    schema = ActionSchema.from_json_schema(
        {
            "type": "object",
            "properties": {
                "velocity": {"type": "number", "x-compact": "v"},
                "verdict": {"enum": ["ok", "no"]},
            },
            "required": ["velocity", "verdict"],
        }
    )
    assert schema.aliases == {"velocity": "v", "verdict": "ve"}


def test_parse_compact_returns_readable_model(robot_schema: ActionSchema) -> None:
    action = robot_schema.parse('{"a":"turn_left","s":0.5}')
    assert robot_schema.readable(action) == {"action": "turn_left", "speed": 0.5}
    assert robot_schema.compact(action) == '{"a":"turn_left","s":0.5}'


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"a":"fly"}', "action"),
        ('{"a":"stop","s":9}', "speed"),
        ('{"a":"stop","zz":1}', "zz"),
        ('{"s":0.5}', "action"),
        ("[1]", "not a JSON object"),
        ('{"a":"st', "not JSON"),
        ('{"a":"stop","s":"fast"}', "speed"),
    ],
)
def test_invalid_compact_output_names_the_problem(
    robot_schema: ActionSchema, text: str, needle: str
) -> None:
    with pytest.raises(InvalidAction) as info:
        robot_schema.parse(text)
    assert needle in str(info.value)
    assert info.value.raw == text


def test_verbose_form_has_reason_and_parses(robot_schema: ActionSchema) -> None:
    verbose = robot_schema.json_schema(ActionForm.VERBOSE)
    assert "reason" in verbose["required"]
    assert "action" in verbose["properties"]
    text = orjson.dumps({"action": "stop", "speed": 0.0, "reason": "x" * 90}).decode()
    assert robot_schema.readable(robot_schema.parse(text, ActionForm.VERBOSE)) == {
        "action": "stop",
        "speed": 0.0,
    }


def test_from_pydantic_model_uses_declared_aliases() -> None:
    class Move(BaseModel):
        direction: str = Field(alias="d", max_length=8)
        distance_m: float = Field(ge=0, le=10)

    schema = ActionSchema.from_model(Move)
    assert schema.aliases == {"direction": "d", "distance_m": "dm"}
    action = schema.parse('{"d":"north","dm":2.5}')
    assert isinstance(action, Move)
    assert action.direction == "north"
    assert schema.compact(action) == '{"d":"north","dm":2.5}'
    with pytest.raises(InvalidAction, match="distance_m"):
        schema.parse('{"d":"north","dm":11}')


def test_pydantic_enum_refs_are_inlined() -> None:
    import enum

    class Gear(enum.Enum):
        LOW = "low"
        HIGH = "high"

    class Shift(BaseModel):
        gear: Gear

    schema = ActionSchema.from_model(Shift)
    assert schema.json_schema()["properties"]["g"]["enum"] == ["low", "high"]
    assert schema.parse('{"g":"high"}') == Shift(gear=Gear.HIGH)


def test_enumerate_finite_space(robot_schema: ActionSchema) -> None:
    actions = robot_schema.enumerate(limit=10)
    assert actions is not None
    assert [robot_schema.readable(a)["action"] for a in actions] == [
        "stop",
        "slow",
        "go",
        "turn_left",
        "turn_right",
        "dock",
    ]
    assert robot_schema.enumerate(limit=5) is None


def test_enumerate_refuses_open_fields() -> None:
    schema = ActionSchema.from_json_schema(
        {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
    )
    assert schema.enumerate(limit=100) is None


def test_fingerprint_is_stable_and_distinguishes(robot_schema: ActionSchema) -> None:
    again = ActionSchema.from_json_schema(
        orjson.loads(orjson.dumps(robot_schema.json_schema(ActionForm.COMPACT)))
    )
    assert robot_schema.fingerprint != again.fingerprint
    from conftest import ROBOT_ACTION

    copy = orjson.loads(orjson.dumps(ROBOT_ACTION))
    assert ActionSchema.from_json_schema(copy).fingerprint == robot_schema.fingerprint


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        ({"type": "array"}, "action.type"),
        ({"type": "object", "properties": {}}, "action.properties"),
        ({"type": "object", "properties": {"a": {"enum": []}}}, "action.properties.a.enum"),
        (
            {"type": "object", "properties": {"a": {"$dynamicRef": "#x"}}},
            "action.properties.a.$dynamicRef",
        ),
        ({"type": "object", "properties": {"a": {"format": "uri"}}}, "action.properties.a.format"),
        (
            {"type": "object", "properties": {"a": {"$ref": "http://x/s.json"}}},
            "action.properties.a.$ref",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
            "action.required",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
            "action.properties.a.$ref",
        ),
    ],
)
def test_unusable_schemas_raise_schema_error_naming_the_field(schema: dict, field: str) -> None:
    with pytest.raises(SchemaError) as info:
        ActionSchema.from_json_schema(schema)
    assert info.value.field == field
    assert field in str(info.value)


def test_validate_accepts_readable_mapping(robot_schema: ActionSchema) -> None:
    action = robot_schema.validate({"action": "dock"})
    assert robot_schema.readable(action) == {"action": "dock"}
    with pytest.raises(InvalidAction, match="action"):
        robot_schema.validate({"action": "jump"})
