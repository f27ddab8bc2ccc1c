"""The JSON Schema of spec and scenario files, for editors that validate YAML as it is typed.

``forethought schema spec`` prints it; with the file saved next to a spec, the comment
``# yaml-language-server: $schema=spec.schema.json`` on the spec's first line makes editors
with the YAML language server (VS Code's YAML extension, Neovim, Helix) complete keys and flag
unknown ones. It is generated from the models the loader validates with, so it cannot drift
from them; what a schema cannot say (a step that divides its range, effects naming state
fields, ``accept`` rules) ``forethought check`` reports.
"""

from __future__ import annotations

from typing import Any

from forethought.policies import AgentSpec

from ._mcap import McapTrace
from ._reactions import WorldBlock
from ._scenario import Drift, Generate, Profile

__all__ = ["spec_file_schema"]

_ACCEPT: dict[str, Any] = {
    "description": "Grading: partial actions an expert accepts, or when/then rules tried in "
    "order (the simulator's business; an agent ignores it).",
    "type": "array",
    "minItems": 1,
    "items": {"type": "object"},
}

_TRACE_EVENT: dict[str, Any] = {
    "type": "object",
    "description": "One event of the trace, at a fixed time.",
    "additionalProperties": False,
    "required": ["at_ms", "type"],
    "properties": {
        "at_ms": {"type": "number", "minimum": 0, "description": "when, from the start"},
        "type": {"type": "string", "minLength": 1},
        "params": {"type": "object"},
        "deadline_ms": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "state": {"type": ["object", "null"], "description": "a state patch before the event"},
        "accept": _ACCEPT,
    },
}


def _defs(model: Any, into: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema(ref_template="#/$defs/{model}")
    into.update(schema.pop("$defs", {}))
    return schema


def spec_file_schema() -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) of a spec file, with a scenario's optional keys."""
    defs: dict[str, Any] = {}
    root = _defs(AgentSpec, defs)
    defs["EventType"]["properties"]["accept"] = _ACCEPT
    defs["Drift"] = _defs(Drift, defs)
    defs["Generate"] = _defs(Generate, defs)
    defs["Profile"] = _defs(Profile, defs)
    defs["McapTrace"] = _defs(McapTrace, defs)
    defs["WorldBlock"] = _defs(WorldBlock, defs)
    props = root["properties"]
    props["trace"] = {"type": "array", "items": _TRACE_EVENT, "description": "fixed events"}
    props["generate"] = {"$ref": "#/$defs/Generate"}
    props["profile"] = {
        "anyOf": [{"type": "string"}, {"$ref": "#/$defs/Profile"}],
        "description": "the simulated device: a shipped profile's name, or figures",
    }
    props["perception_ms"] = {
        "anyOf": [
            {"type": "number", "minimum": 0},
            {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
        ]
    }
    props["seed"] = {"type": "integer"}
    props["mcap"] = {"$ref": "#/$defs/McapTrace"}
    props["world"] = {"$ref": "#/$defs/WorldBlock"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **root,
        "title": "Forethought spec or scenario file",
        "$defs": defs,
    }
