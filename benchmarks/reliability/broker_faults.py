"""R3 of the reliability suite: the broker crashes and freezes (issue 12).

A real Mosquitto with persistence (sessions and queued QoS 1 messages saved after every
change), a real agent on it, and two more real clients, both with persistent sessions and
reconnect loops of their own: a *sensor* publishing numbered events at 50 Hz at QoS 1 and
re-sending any event the broker did not acknowledge, and an *actuator* subscribed at QoS 1
through one client kept across its reconnections, acting once per event id
(:class:`~forethought.runtime.ActedIds`) and recording every delivery. Meanwhile the broker
is killed with SIGKILL and started again at random gaps, and frozen with SIGSTOP until the
agent notices.

What must hold: nothing acknowledged is lost or acted on late -- every event the sensor got a PUBACK
for gets an action or a refusal on the errors topic (lost = those that get neither; refusals are
counted by reason beside, an event refused as expired being reported, not lost), and none is acted
on after its deadline counted from when the sensor sent it (the actuator drops an action that
arrives after the ``deadline_ns`` it carries); none is actuated twice (acted on again after the
dedupe). Reported beside it: how many arrived twice (what an actuator acting on every arrival would
have doubled), and how many came with two different decisions (the agent deciding an event twice,
which the dedupe hides; a redelivered copy is byte for byte the same). ``actions_qos=2`` shows what
the agent's decisions at QoS 2 do, ``actuator_qos=2`` what a QoS 2 subscriber loses,
``resend_window_s=0`` what the agent's resend after an outage saves. The agent is subscribed again
soon after each restart (reconnect p50/p99, from its loss of the connection); a frozen broker is
noticed (detection time, against 1.5 x keepalive); and the retained status tells the truth after
every reconnection (online) and after the agent stops (the will's or its own ``offline``).


Event deadlines are long here (60 s): the row is about delivery through outages, not about
deadlines, which an outage of seconds would pass (an expired event is reported on the
errors topic instead; R2 and the executor bench measure latency).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import orjson
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from forethought.models import ModelBackend
from forethought.planner import PlannerConfig
from forethought.policies import AgentSpec
from forethought.runtime import ActedIds, Topics, stamp_event
from forethought.runtime.transports._paho_session import read_disconnect
from forethought.testing import MosquittoBroker, until

from .specs import FAULTS_SPEC, heartbeat_node

__all__ = ["run_agent_kills", "run_broker_faults"]


def _session() -> dict[str, Any]:
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = 300
    return {"clean_start": False, "properties": props, "protocol": aiomqtt.ProtocolVersion.V5}


_DEADLINE_MS = 60_000


async def _sensor(
    port: int,
    agent: str,
    n: int,
    hz: float,
    acked: dict[int, float],
    sent_ns: dict[str, int] | None = None,
) -> None:
    """Publish events 0..n-1 at ``hz``, each until the broker acknowledges it (and when).

    ``sent_ns``: filled with each acknowledged event's ``sent_at_ns`` (the ground truth its
    deadline counts from).
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    i = 0
    while i < n:
        client = aiomqtt.Client(
            "127.0.0.1", port, identifier=f"{agent}-sensor", timeout=2.0, **_session()
        )
        with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
            async with client:
                while i < n:
                    delay = start + i / hz - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    body = {"id": f"m{i}", "type": "heartbeat", "deadline_ms": _DEADLINE_MS}
                    stamped = stamp_event(body)
                    await client.publish(
                        Topics(agent).event("x"), orjson.dumps(stamped), qos=1, timeout=2.0
                    )
                    acked[i] = loop.time()
                    if sent_ns is not None:
                        sent_ns[f"m{i}"] = stamped["sent_at_ns"]
                    i += 1
        # A crash between publishes is read by the next publish; one during a publish's wait
        # for its PUBACK ends in a timeout, and the "unexpected disconnection" stays unread:
        # asyncio logs it when this client is collected (traced: every such log of the R3
        # bench came from here).
        read_disconnect(client)
        await asyncio.sleep(0.05)  # the broker is down: try again soon


@dataclass(slots=True)
class _Actuations:
    """What the actuator got: every delivery per event id, and what it acted on."""

    window_s: float = 60.0  # the events' deadline: an action older than that is stale anyway
    deliveries: dict[str, list[bytes]] = field(default_factory=dict)
    acted: dict[str, int] = field(default_factory=dict)
    acted_at_ns: dict[str, int] = field(default_factory=dict)
    """When each id was first acted on (wall clock)."""
    sent_ns: dict[str, int] = field(default_factory=dict)
    """The sensor's record: when each event was sent (wall clock)."""
    dropped_late: int = 0
    """Actions not acted on: they arrived after the ``deadline_ns`` they carry."""
    refusals: dict[str, str] = field(default_factory=dict)
    """The agent's refusals on the errors topic, per event id: reported, so not lost."""
    ids: ActedIds = field(init=False)

    def __post_init__(self) -> None:
        self.ids = ActedIds(window_s=self.window_s)

    def take(self, raw: bytes, now: float) -> None:
        body = orjson.loads(raw)
        ident = str(body.get("id", "?"))
        self.deliveries.setdefault(ident, []).append(raw)
        wall = time.time_ns()
        deadline = body.get("deadline_ns")
        if deadline is not None and wall > deadline:  # an actuator never acts on a late action
            self.dropped_late += 1
            return
        if self.ids.first(ident, now=now):
            self.acted[ident] = self.acted.get(ident, 0) + 1
            self.acted_at_ns.setdefault(ident, wall)

    def refuse(self, raw: bytes) -> None:
        """A refusal from the errors topic (one without an event id says nothing here)."""
        body = orjson.loads(raw)
        if "error" in body and "id" in body:
            self.refusals.setdefault(str(body["id"]), str(body["error"]))

    def answered(self) -> set[str]:
        """Ids that got an action or a refusal."""
        return set(self.deliveries) | set(self.refusals)

    def figures(self, sent: set[str]) -> dict[str, Any]:
        """Lost, acted on late, and the three kinds of "twice", over the acknowledged ids.

        Lost: neither an action nor a refusal came. An event refused (as expired, say) is
        reported on the errors topic, and counted by reason beside.
        """
        got = {i: d for i, d in self.deliveries.items() if i in sent}
        due = {i: t + _DEADLINE_MS * 1_000_000 for i, t in self.sent_ns.items()}
        refused: dict[str, int] = {}
        for ident, why in self.refusals.items():
            if ident in sent and ident not in got:
                kind = why.split(":", 1)[0]
                refused[kind] = refused.get(kind, 0) + 1
        return {
            "lost": len(sent - set(got) - set(self.refusals)),
            "refused": refused,
            # Acted on after the event's deadline, counted from when the sensor sent it.
            "acted_late": sum(at > due.get(i, at) for i, at in self.acted_at_ns.items()),
            "dropped_late": self.dropped_late,
            # Arrivals beyond the first per id (the broker's redelivery, or the agent's repeat):
            # what an actuator acting on every arrival would have acted on twice.
            "delivered_twice": sum(len(d) - 1 for d in got.values()),
            # Acted on again after the dedupe by id: the must-hold figure.
            "actuated_twice": sum(n - 1 for i, n in self.acted.items() if i in sent),
            # Ids that came with two different decisions: the agent decided the event twice
            # (a redelivered copy is byte for byte the same).
            "decided_twice": sum(len(set(d)) > 1 for d in got.values()),
            # Which, and how each copy was decided (tier, when): one agent twice, or two.
            "decided_twice_examples": _twice_examples(got),
            "repeat_gap_max_s": round(self.ids.stats.repeat_gap_max_s, 3),
            "dedupe_forgotten_early": self.ids.stats.forgotten_early,
        }


def _twice_examples(got: dict[str, list[bytes]]) -> dict[str, list[Any]]:
    """Up to 5 ids that came with two different decisions: each copy's tier and decision time."""
    out: dict[str, list[Any]] = {}
    for ident, copies in got.items():
        distinct = list(dict.fromkeys(copies))
        if len(distinct) > 1 and len(out) < 5:
            bodies = [orjson.loads(raw) for raw in distinct]
            out[ident] = [(b.get("tier"), b.get("decided_at_ns")) for b in bodies]
    return out


async def _actuator(
    port: int, agent: str, log: _Actuations, ready: asyncio.Event, qos: int = 1
) -> None:
    """Take actions, across broker restarts, acting once per event id (:class:`ActedIds`).

    Subscribed at ``qos`` through one client kept across reconnections (its session's memory
    of half-received messages outlives each connection). QoS 1 by default: it delivers on
    arrival, so what a crashed broker sends again is the dedupe's to drop. At QoS 2 a broker
    restarted from an older saved state can reuse a packet id this session still holds, and an
    action is then lost (see the README, R3).
    """
    loop = asyncio.get_running_loop()
    client = aiomqtt.Client("127.0.0.1", port, identifier=f"{agent}-actuator", **_session())
    while True:
        with contextlib.suppress(aiomqtt.MqttError):
            async with client:
                await client.subscribe(Topics(agent).actions, qos=qos)
                # Refusals too: an event refused (as expired, say) is reported, not lost.
                await client.subscribe(Topics(agent).errors, qos=qos)
                ready.set()
                async for m in client.messages:
                    raw = m.payload if isinstance(m.payload, bytes) else b"{}"
                    if m.topic.value.endswith("/errors"):
                        log.refuse(raw)
                    else:
                        log.take(raw, loop.time())
        await asyncio.sleep(0.05)


def _before_fault(
    ids: list[str], acked: dict[int, float], faults_at: list[float]
) -> dict[str, float | None]:
    """Per event id: ms from the broker's acknowledgement to the next fault (None: none)."""
    out: dict[str, float | None] = {}
    for ident in ids[:20]:
        t = acked.get(int(ident[1:]))
        after = [f for f in faults_at if t is not None and f >= t]
        out[ident] = round((after[0] - t) * 1e3, 1) if t is not None and after else None
    return out


async def _retained_status(port: int, agent: str) -> Any:
    """The retained status, as a client connecting now reads it."""
    async with aiomqtt.Client("127.0.0.1", port, identifier=f"{agent}-reader") as reader:
        await reader.subscribe(Topics(agent).status, qos=1)
        async with asyncio.timeout(5):
            m = await anext(aiter(reader.messages))
    return orjson.loads(m.payload if isinstance(m.payload, bytes) else b"null")


async def run_broker_faults(
    backend: ModelBackend,
    *,
    kills: int,
    freezes: int,
    gap_s: tuple[float, float] = (2.0, 15.0),
    hz: float = 50.0,
    keepalive: int = 2,
    seed: int = 3,
    session_expiry_s: int = 300,
    actions_qos: int = 1,
    actuator_qos: int = 1,
    resend_window_s: float = 0.5,
) -> dict[str, Any]:
    """R3: ``kills`` SIGKILLs and ``freezes`` SIGSTOPs of a persistent Mosquitto.

    ``session_expiry_s=0`` runs the agent on clean sessions: the check that the persistent
    session is what keeps events sent before it resubscribes.
    """
    from forethought.runtime import Agent, AgentConfig, MqttBus  # noqa: PLC0415

    rng = random.Random(seed)
    agent_id = "r3"
    acked: dict[int, float] = {}
    log = _Actuations()
    faults_at: list[float] = []
    status_ok = status_checks = 0
    detections: list[float | None] = []
    with MosquittoBroker(persistent=True) as broker:
        bus = MqttBus(
            url=broker.url,
            agent_id=agent_id,
            keepalive=keepalive,
            reconnect_min_s=0.05,
            reconnect_max_s=0.5,
            session_expiry_s=session_expiry_s,
            actions_qos=actions_qos,
            resend_window_s=resend_window_s,
        )
        cfg = AgentConfig.defaults(planner=PlannerConfig(enabled=False))
        agent = Agent(AgentSpec.from_data(FAULTS_SPEC), backend=backend, bus=bus, config=cfg)
        async with agent:
            agent.tree.insert(heartbeat_node(agent, backend.model_id))
            await bus.wait_connected(10)
            ready = asyncio.Event()
            gaps = [rng.uniform(*gap_s) for _ in range(kills + freezes)]
            n = int(hz * (sum(gaps) + 3.0))
            async with asyncio.TaskGroup() as tg:
                act = tg.create_task(
                    _actuator(broker.port, agent_id, log, ready, actuator_qos), name="act"
                )
                await ready.wait()
                sensor = tg.create_task(
                    _sensor(broker.port, agent_id, n, hz, acked, log.sent_ns), name="s"
                )
                order = ["kill"] * kills + ["freeze"] * freezes
                rng.shuffle(order)
                for what, gap in zip(order, gaps, strict=True):
                    await asyncio.sleep(gap)
                    faults_at.append(asyncio.get_running_loop().time())
                    if what == "kill":
                        broker.stop()
                        await asyncio.to_thread(broker.start)
                    else:
                        broker.freeze()
                        detections.append(await until(lambda: not bus.connected, 6 * keepalive))
                        broker.thaw()
                    if await until(lambda: bus.connected, 30.0) is not None:
                        await asyncio.sleep(0.2)  # its online status is published on connect
                        with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
                            status_checks += 1
                            status_ok += (await _retained_status(broker.port, agent_id)).get(
                                "online"
                            ) is True
                await sensor
                t_end = time.monotonic()
                await until(lambda: len(log.answered()) >= len(acked), 30.0)
                act.cancel()
            stats = bus.stats
            # A lost event the agent never decided never reached it: the broker lost it.
            assert agent.executor is not None
            never_decided = sorted(
                f"m{i}"
                for i in acked
                if f"m{i}" not in log.answered() and not agent.executor.known(f"m{i}")
            )
        final = await _retained_status(broker.port, agent_id)
    reconnect = sorted(stats.reconnect_s)
    sent = {f"m{i}" for i in acked}
    return {
        "events": n,
        "acked": len(acked),
        "kills": kills,
        "freezes": freezes,
        "keepalive_s": keepalive,
        **log.figures(sent),
        "actions_qos": actions_qos,
        "actuator_qos": actuator_qos,
        # Which, and how long after the broker acknowledged them the next fault came.
        "lost_before_fault_ms": _before_fault(sorted(sent - log.answered()), acked, faults_at),
        "lost_never_reached_the_agent": never_decided[:20],
        "twice_before_fault_ms": _before_fault(
            sorted(i for i, d in log.deliveries.items() if i in sent and len(d) > 1),
            acked,
            faults_at,
        ),
        "reconnects": len(reconnect),
        "reconnect_p50_s": reconnect[len(reconnect) // 2] if reconnect else None,
        "reconnect_p99_s": reconnect[min(int(0.99 * len(reconnect)), len(reconnect) - 1)]
        if reconnect
        else None,
        "freeze_detected_s": detections,
        "freeze_detect_max_s": max((d for d in detections if d is not None), default=None),
        "status_checks": status_checks,
        "status_online_when_connected": status_ok,
        "status_after_stop": final,
        "held": stats.held,
        "republished": stats.republished,
        "resent": stats.resent,
        "resend_window_s": resend_window_s,
        "repeats_suppressed": stats.repeats_suppressed,
        "outbox_dropped": stats.outbox_dropped,
        "drain_s": time.monotonic() - t_end,
    }


# -- the agent killed -------------------------------------------------------------------------


async def _status_watch(port: int, agent: str, seen: list[tuple[float, Any]]) -> None:
    """Every retained-status update, with the loop time it arrived."""
    loop = asyncio.get_running_loop()
    while True:
        with contextlib.suppress(aiomqtt.MqttError):
            async with aiomqtt.Client("127.0.0.1", port, identifier=f"{agent}-watch") as c:
                await c.subscribe(Topics(agent).status, qos=1)
                async for m in c.messages:
                    raw = m.payload if isinstance(m.payload, bytes) else b"null"
                    seen.append((loop.time(), orjson.loads(raw)))
        await asyncio.sleep(0.05)


def agent_process(cmd: list[str]) -> subprocess.Popen[bytes]:
    """``forethought run`` (``cmd``) as a process of its own, offline, its output dropped."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def online_after(statuses: list[tuple[float, Any]], t: float) -> bool:
    """Whether a retained status said online at or after ``t`` (loop time)."""
    return any(at >= t and s.get("online") is True for at, s in statuses)


def _agent_command(spec: Path, config: Path, url: str, agent: str) -> list[str]:
    return [
        sys.executable, "-m", "forethought._cli", "run", str(spec),
        "--mqtt", url, "--agent-id", agent, "--config", str(config),
    ]  # fmt: skip


async def run_agent_kills(
    model: str,
    *,
    kills: int,
    gap_s: tuple[float, float] = (3.0, 8.0),
    hz: float = 20.0,
    seed: int = 5,
) -> dict[str, Any]:
    """R3's last part: ``forethought run`` killed with SIGKILL ``kills`` times, restarted.

    The agent is a real process with a snapshot saved every second; the sensor (20 Hz: the
    restarted agent must also work off the backlog, on whatever tier answers heartbeats) and
    the actuator stay up. Must hold: every event the broker acknowledged gets an action (events are
    acknowledged by the agent only once decided, so the broker sends the undecided ones again
    to the restarted agent), none gets two, the will says offline after each kill and the
    agent's own status online after each restart, and the restarted agent starts from its
    snapshot (its first report counts tree nodes).
    """
    rng = random.Random(seed)
    agent_id = "r3-agent"
    acked: dict[int, float] = {}
    log = _Actuations()
    statuses: list[tuple[float, Any]] = []
    rows: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory() as tmp, MosquittoBroker(persistent=True) as broker:
        spec, config = Path(tmp) / "spec.json", Path(tmp) / "agent.toml"
        # Heartbeats weigh like any event here: the planner writes their answer first, so the
        # row measures delivery through kills, not how fast the model decides a backlog.
        events = [{**e, "weight": 1.0} for e in FAULTS_SPEC["events"]]
        spec.write_bytes(orjson.dumps({**FAULTS_SPEC, "events": events}))
        snapshot = Path(tmp) / "tree.json"
        config.write_text(
            f'model = "{model}"\nsnapshot = "{snapshot}"\n'
            "snapshot_interval_s = 1.0\n"
            "[planner]\nbatch_size = 2\nhorizon = 1\nmin_rate = 0.0\ncost_weight = 0.0\n"
            "learn = false\n[mqtt]\nkeepalive = 2\n[health]\ninterval_s = 0.5\n"
        )
        cmd = _agent_command(spec, config, broker.url, agent_id)

        def start() -> subprocess.Popen[bytes]:
            return agent_process(cmd)

        def online_since(t: float) -> bool:
            return online_after(statuses, t)

        async with asyncio.TaskGroup() as tg:
            watch = tg.create_task(_status_watch(broker.port, agent_id, statuses), name="w")
            ready = asyncio.Event()
            act = tg.create_task(_actuator(broker.port, agent_id, log, ready), name="act")
            await ready.wait()
            proc = start()
            t0 = loop.time()
            await until(lambda: online_since(t0), 120.0)
            gaps = [rng.uniform(*gap_s) for _ in range(kills)]
            n = int(hz * (sum(gaps) + 10.0 * kills + 5.0))
            sensor = tg.create_task(
                _sensor(broker.port, agent_id, n, hz, acked, log.sent_ns), name="s"
            )
            for gap in gaps:
                await asyncio.sleep(gap)
                # The row is about restarting from a snapshot: one must exist before the kill.
                # The planner writes its first branch (and the agent saves it within
                # ``snapshot_interval_s``) seconds after a start on a loaded machine, which a
                # kill at the gap alone could precede every time (0 of 5 restarts found one).
                saved = await until(snapshot.exists, 120.0)
                killed_at = loop.time()  # before: the will may come while we reap it
                proc.kill()
                await asyncio.to_thread(proc.wait)
                will = await until(
                    lambda at=killed_at: any(
                        t >= at and s == {"online": False} for t, s in statuses
                    ),
                    10.0,
                )
                # From here on: a report the killed agent sent just before the kill can reach
                # the watcher after ``killed_at`` (a run of c8eec6c took one for the restarted
                # agent's "online", then killed that agent before it had connected).
                restarted_at = loop.time()
                proc = start()
                back = await until(lambda at=restarted_at: online_since(at), 120.0)
                if back is not None:
                    back += restarted_at - killed_at

                def report(at: float = restarted_at) -> Any:
                    return next((s for t, s in statuses if t >= at and "tree" in (s or {})), None)

                await until(lambda: report() is not None, 10.0)
                first = report()
                rows.append(
                    {
                        "snapshot_waited_s": saved,
                        "will_offline_after_s": will,
                        "online_again_after_s": back,
                        "tree_nodes_at_restart": first["tree"]["nodes"] if first else None,
                    }
                )
            await sensor
            await until(lambda: log.answered() >= {f"m{i}" for i in acked}, 60.0)
            proc.terminate()
            await asyncio.to_thread(proc.wait)
            last = statuses[-2][1] if len(statuses) > 1 else None  # before its "offline"
            act.cancel()
            watch.cancel()
    sent = {f"m{i}" for i in acked}
    backs = sorted(r["online_again_after_s"] for r in rows if r["online_again_after_s"])
    return {
        "kills": kills,
        "hz": hz,
        "events": n,
        "acked": len(acked),
        **log.figures(sent),
        "will_offline_every_kill": all(r["will_offline_after_s"] is not None for r in rows),
        "restart_to_online_max_s": backs[-1] if backs else None,
        "restarted_from_snapshot": sum(bool(r["tree_nodes_at_restart"]) for r in rows),
        "last_report": last,
        "rows": rows,
    }
