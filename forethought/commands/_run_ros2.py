"""``forethought run SPEC --ros2 MAP.yaml``: the agent as a node of a ROS 2 graph (rmw_zenoh).

The map is checked against the spec first (every problem at once, as ``forethought check``
reports them); the node connects to the Zenoh router rmw_zenoh's nodes use
(``tcp/localhost:7447``) unless ``--zenoh`` names other endpoints or ``--zenoh-listen`` makes
it listen; ``ROS_DOMAIN_ID`` picks the domain, as for any ROS 2 node; the Zenoh bus's TLS and
user options apply as they are.
"""

from __future__ import annotations

import os
from pathlib import Path

from forethought.policies import AgentSpec, ConfigError
from forethought.runtime import Ros2Bus, ZenohConfig, check_ros2_map, load_ros2_map

__all__ = ["ros2_bus"]


def ros2_bus(
    map_path: Path,
    spec: AgentSpec,
    zenoh: ZenohConfig,
    *,
    connect: list[str] | None,
    listen: list[str] | None,
    node: str | None,
) -> tuple[Ros2Bus, str]:
    """The bus, and a line saying where it is."""
    ros2_map = load_ros2_map(map_path)
    found = check_ros2_map(ros2_map, spec, where=str(map_path))
    problems = [p for p in found if p.severity == "error"]
    if problems:
        raise ConfigError(str(map_path), None, "; ".join(p.line() for p in problems))
    domain = os.environ.get("ROS_DOMAIN_ID", "0") or "0"
    if not domain.isdigit():
        raise ConfigError("ROS_DOMAIN_ID", domain, "a number, 0..232")
    ends_connect = connect or list(zenoh.connect)
    ends_listen = listen or list(zenoh.listen)
    bus = Ros2Bus(
        ros2_map,
        default_action=spec.default_action,
        type_defaults=spec.type_defaults(),
        node=node or "forethought",
        domain_id=int(domain),
        # neither: the local router, as rmw_zenoh's nodes
        connect=ends_connect if ends_connect or ends_listen else None,
        listen=ends_listen,
        security=zenoh.security(),
        queue_size=zenoh.queue_size,
    )
    topics = ", ".join(ros2_map.topics)
    ends = " ".join([*ends_connect, *ends_listen]) or "tcp/localhost:7447"
    where = (
        f"ROS 2 over rmw_zenoh ({ends}, domain {domain}); node {bus.node}; "
        f"subscribed {topics}; actions on {ros2_map.actions.topic}"
    )
    return bus, where
