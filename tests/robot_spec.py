"""The warehouse robot many tests build their agent on: one action, one default, one prompt.

Tests differ in their name, initial state and events; what a robot may do stays the same, so
a change to the action schema is made here once.
"""

from __future__ import annotations

from typing import Any


def robot_spec(
    name: str, events: list[dict[str, Any]], *, state: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A spec document: stop, slow or go (``{"a": ...}``), stopping by default."""
    spec: dict[str, Any] = {
        "name": name,
        "description": "You steer a warehouse robot. Answer with the safest action.",
        "action": {
            "type": "object",
            "properties": {"a": {"enum": ["stop", "slow", "go"]}},
            "required": ["a"],
        },
        "default_action": {"a": "stop"},
    }
    if state is not None:
        spec["state"] = state
    spec["events"] = events
    return spec
