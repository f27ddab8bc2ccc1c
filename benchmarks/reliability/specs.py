"""The agent specs the reliability suite's rows run, and the tree node that makes heartbeats hits.

In a module of their own because every row's module uses them (R4, R3, R11 and the suite's
own rows): none of those imports another for a spec.
"""

from __future__ import annotations

import asyncio
from typing import Any

from forethought.policies import EventKey, PolicyNode

__all__ = ["FAULTS_SPEC", "RELIABILITY_SPEC", "heartbeat_node"]

RELIABILITY_SPEC: dict[str, Any] = {
    "name": "reliability",
    "description": "You steer a warehouse robot. Answer with the safest action.",
    "action": {
        "type": "object",
        "properties": {
            "action": {"enum": ["stop", "slow", "go"]},
            "speed": {"type": "number", "minimum": 0, "maximum": 1.5},
        },
        "required": ["action"],
    },
    "default_action": {"action": "stop"},
    "state": {"zone": "aisle", "battery": 0.8},
    "events": [
        {
            "type": "obstacle",
            "params": {"side": ["left", "right"], "distance_m": {"min": 0, "max": 3, "step": 0.5}},
            "deadline_ms": 600,
        },
        {"type": "clear", "deadline_ms": 1000},
    ],
}

FAULTS_SPEC: dict[str, Any] = {
    **RELIABILITY_SPEC,  # its description, action schema and default
    "name": "faults",
    "state": {"zone": "aisle", "shift": 0},
    "events": [
        # Depends on no state: the tree keeps its answer while the planner's work moves on.
        {"type": "heartbeat", "state_fields": [], "deadline_ms": 50, "weight": 0.01},
        {
            "type": "obstacle",
            "params": {"side": ["left", "right"], "distance_m": {"min": 0, "max": 3, "step": 0.5}},
            "deadline_ms": 600,
        },
        {"type": "clear", "deadline_ms": 1000},
    ],
}


def heartbeat_node(agent: Any, model_id: str) -> PolicyNode:
    """The tree's answer to a heartbeat (state-free): what makes heartbeats tree hits."""
    return PolicyNode(
        fingerprint=agent.state.fingerprint_for("heartbeat"),
        key=EventKey("heartbeat", ()),
        action={"action": "slow", "speed": 0.5},
        compact='{"action":"slow","speed":0.5}',
        probability=1.0,
        model_id=model_id,
        tokens=0,
        gen_seconds=0.0,
        created_at=asyncio.get_running_loop().time(),
    )
