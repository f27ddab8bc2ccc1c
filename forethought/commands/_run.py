"""``forethought run``: an agent on a broker (MQTT or Zenoh) or a ROS 2 graph."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any, TypeVar

import orjson

from forethought.models.internals import wait_cancelled
from forethought.policies import ConfigError
from forethought.runtime import (
    Agent,
    AgentConfig,
    EventBus,
    McapRecorder,
    MqttBus,
    MqttConfig,
    ZenohBus,
    ZenohConfig,
)
from forethought.sims import load_spec

from ._start_display import StartDisplay

__all__ = [
    "log_coverage",
    "run_agent",
    "settings_with",
]

_C = TypeVar("_C", MqttConfig, ZenohConfig)


def settings_with(cfg: _C, tls: dict[str, Any]) -> _C:
    """``cfg`` with the command line's TLS and user flags (a password never comes here)."""
    given = {k: v for k, v in tls.items() if v is not None}
    return cfg.model_copy(update=given) if given else cfg


def _bus(
    cfg: AgentConfig,
    *,
    mqtt: str | None,
    zenoh: list[str] | None,
    zenoh_listen: list[str] | None,
    agent_id: str | None,
    tls: dict[str, Any],
    zenoh_tls: dict[str, Any],
) -> tuple[EventBus, str, str]:
    """The bus the flags and the configuration ask for: (bus, where, agent id)."""
    z = settings_with(cfg.zenoh, zenoh_tls)
    connect, listen = zenoh or z.connect, zenoh_listen or z.listen
    if connect or listen:
        if mqtt is not None:
            raise ConfigError("--zenoh", connect or listen, "choose one bus: --mqtt or --zenoh")
        bus = ZenohBus.from_config(z, connect=connect, listen=listen, agent_id=agent_id)
        return bus, f"zenoh {' '.join([*connect, *listen])}", bus.agent_id
    settings = settings_with(cfg.mqtt, tls)
    url = mqtt or settings.url
    if url is None:
        raise ConfigError(
            "mqtt", None, "give --mqtt mqtt://host:port or --zenoh tcp/host:port (or config)"
        )
    mqtt_bus = MqttBus.from_config(settings, url=url, agent_id=agent_id)
    return mqtt_bus, f"{url}; events on {mqtt_bus.events_filter}", mqtt_bus.agent_id


async def run_agent(
    spec: Path,
    *,
    mqtt: str | None,
    agent_id: str | None,
    config: Path | None,
    tls: dict[str, Any] | None = None,
    zenoh_tls: dict[str, Any] | None = None,
    models: dict[str, str | None] | None = None,
    zenoh: list[str] | None = None,
    zenoh_listen: list[str] | None = None,
    record: Path | None = None,
    health_port: int | None = None,
    metrics: bool = False,
    fleet: dict[str, Any] | None = None,
    ros2: Path | None = None,
) -> int:
    """Run an agent on a broker or a Zenoh network until SIGINT or SIGTERM; shut down cleanly.

    ``ros2`` (a map file): the agent is a node of a ROS 2 graph over rmw_zenoh instead.

    ``health_port`` serves ``/health`` over HTTP (and ``/metrics`` with ``metrics``), over
    the configuration's ``health`` table.

    A broker that refuses the credentials or whose certificate is not accepted ends the
    run with one ConfigError naming the cause.
    """
    given = {k: v for k, v in (models or {}).items() if v is not None}
    cfg = AgentConfig.load(config, **given)
    if health_port is not None or metrics:
        update: dict[str, Any] = {"prometheus": True} if metrics else {}
        if health_port is not None:
            update["port"] = health_port
        if cfg.health.port is None and "port" not in update:
            raise ConfigError("--metrics", True, "needs --health-port (or health.port)")
        cfg = cfg.model_copy(update={"health": cfg.health.model_copy(update=update)})
    given_fleet = {k: v for k, v in (fleet or {}).items() if v is not None}
    if given_fleet:
        fleet_cfg = cfg.fleet.model_copy(update=given_fleet)
        if "robot" not in given_fleet and agent_id is not None:
            fleet_cfg = fleet_cfg.model_copy(update={"robot": agent_id})
        cfg = cfg.model_copy(
            update={"fleet": type(fleet_cfg).model_validate(fleet_cfg.model_dump())}
        )
    if ros2 is not None:  # a ROS 2 node over rmw_zenoh (forethought[ros2])
        from forethought.commands._run_ros2 import ros2_bus  # noqa: PLC0415

        if mqtt is not None:
            raise ConfigError("--ros2", str(ros2), "choose one bus: --mqtt or --ros2")
        z = settings_with(cfg.zenoh, zenoh_tls or {})
        node = agent_id or "forethought"
        ros2_node, where = ros2_bus(
            ros2, load_spec(spec), z, connect=zenoh, listen=zenoh_listen, node=node
        )
        bus: EventBus = ros2_node
        ident = ros2_node.agent_id
    else:
        bus, where, ident = _bus(
            cfg,
            mqtt=mqtt,
            zenoh=zenoh,
            zenoh_listen=zenoh_listen,
            agent_id=agent_id,
            tls=tls or {},
            zenoh_tls=zenoh_tls or {},
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # A scenario file is a spec plus a trace and grading: load_spec leaves those out.
    recorder = McapRecorder(record).open() if record is not None else None
    connect_s = settings_with(cfg.mqtt, tls or {}).connect_timeout_s
    try:
        with StartDisplay() as display:
            agent = Agent(load_spec(spec), bus=bus, config=cfg, recorder=recorder, steps=display)
            return await _serve_agent(agent, ident, where, stop, connect_s, display)
    finally:
        if recorder is not None:
            recorder.close()


async def _connected(
    agent: Agent, stop: asyncio.Event, timeout_s: float, display: StartDisplay
) -> asyncio.Task[None]:
    """Wait until an MQTT agent's bus is connected; the task serving it meanwhile.

    A broker that does not answer within ``timeout_s`` (0: wait for ever) ends the run with
    one ConfigError; so does a failure of the agent while it waits (credentials refused).
    """
    serving = asyncio.create_task(agent.serve_until(stop), name="forethought.run.serve")
    bus = agent.bus
    if not isinstance(bus, MqttBus):
        return serving
    if timeout_s == 0:
        display.say(f"forethought: waiting for the broker at {bus.url}")
    waiter = asyncio.create_task(
        bus.wait_connected(timeout_s or None), name="forethought.run.connected"
    )
    with display.step(f"bus: connecting to {bus.url}"):
        await asyncio.wait([serving, waiter], return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            waiter.cancel()
            serving.result()  # the agent's failure, raised here
            return serving  # stopped before it connected
        try:
            waiter.result()
        except TimeoutError:
            serving.cancel()
            await wait_cancelled(serving)
            raise ConfigError(
                "mqtt",
                bus.url,
                f"no broker answered within {timeout_s:g} s "
                "(mqtt.connect_timeout_s; 0 keeps retrying)",
            ) from None
    return serving


async def _serve_agent(
    agent: Agent,
    ident: str,
    where: str,
    stop: asyncio.Event,
    connect_timeout_s: float,
    display: StartDisplay,
) -> int:
    async with agent:
        serving = await _connected(agent, stop, connect_timeout_s, display)
        health = ""
        if agent.health_endpoint is not None:
            h = agent.config.health
            health = f"; health on http://{h.host}:{agent.health_endpoint.port}/health"
        display.say(
            f"forethought: agent {ident!r} ready on {where}; models: {agent.models()}{health}"
        )
        progress = asyncio.create_task(
            log_coverage(agent, display=display), name="forethought.coverage-log"
        )
        try:
            await serving
        finally:
            progress.cancel()
            await wait_cancelled(progress)
        display.say("forethought: shutting down")
    display.finish()
    stats = agent.stats()
    print(
        orjson.dumps(
            {
                "decisions": stats["executor"]["decisions"],
                "tiers": stats["executor"]["tiers"],
                "tree_nodes": stats["tree"]["nodes"],
                "bus": stats.get("bus"),
            }
        ).decode(),
        flush=True,
    )
    return 0


async def log_coverage(
    agent: Agent, *, every_s: float = 2.0, display: StartDisplay | None = None
) -> None:
    """Say, while the planner writes, how much of the next event the tree answers.

    A line on stderr (or ``display``'s bar) when the figure moves (looked at every
    ``every_s``), and one when the planner has nothing left worth writing: what an operator
    watches between "ready" and a full tree. Runs until cancelled.
    """
    planner = agent.planner
    if planner is None:
        return
    show = display or StartDisplay(live=False)
    said: tuple[float, bool] | None = None
    while True:
        tree = agent.health().tree
        coverage = tree.answerable or 0.0
        asleep = planner.sleeping
        now = (round(coverage, 3), asleep)
        if now != said:
            said = now
            show.coverage(coverage, tree.nodes, idle=asleep)
        await asyncio.sleep(every_s)
