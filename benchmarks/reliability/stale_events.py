"""R11 of the reliability suite: a stale event never acts.

A real Mosquitto with persistence; ``forethought run`` as a real process with a persistent
session; a *sender* at 50 Hz whose events carry 200-500 ms deadlines, ``sent_at_ns`` and a
Message Expiry Interval, as ``forethought send`` does; an *actuator* subscribed to the actions
topic, acting once per event id, only on a ``met`` action that arrives before the action's own
``deadline_ns``; and a watcher of the errors topic. Meanwhile the agent is SIGKILLed and started
again (``agent_kills`` times) and the broker killed and started again (``broker_restarts``
times), in a shuffled order at random gaps: each outage leaves a backlog of events older than
their deadlines, in the broker's queue and in the agent's persistent session.

Ground truth is the sender's own record (one host, one clock): when each event was sent, and
its deadline. What must hold:

* ``late_actions``: 0 actions for events older than their deadline reach the actuator -- no
  action decided after its event's deadline (the ``decided_at_ns`` the action carries, against
  the sender's send time + deadline);
* ``met_true_late``: 0 of those say ``met: true``;
* ``acted_late``: 0 acted on after the event's deadline (the actuator's receipt);
* ``unexplained_missing``: every event the broker acknowledged gets an action or a refusal on
  the errors topic (expired ones counted there, ``expired: waited N ms before arrival``), unless
  an outage covered its whole life (``missing_in_outage``: the agent died with it, or the broker
  dropped it) or the broker dropped it when its Message Expiry passed in the queue
  (``expired_at_broker``: the next later event to come back came more than its expiry interval
  after it was sent).

Also measured, once the faults are over: the clock skew the agent tolerates (a sender's clock
set off by each of ``skews_ms``: which events are decided in time, which refused), and how
long ``forethought send`` takes to hear a refusal (``--deadline-ms 0``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import orjson

from forethought.runtime import ActedIds, Topics, expiry_interval_s, expiry_properties
from forethought.testing import MosquittoBroker, until

from .broker_faults import (
    _agent_command,
    _session,
    _status_watch,
    agent_process,
    online_after,
)
from .specs import FAULTS_SPEC

__all__ = ["run_stale_events"]

_SPEC: dict[str, Any] = {
    **FAULTS_SPEC,
    "name": "stale",
    # The heartbeat's deadline is the payload's (200-500 ms); the type's is the longest.
    "events": [{"type": "heartbeat", "state_fields": [], "deadline_ms": 500}],
}
_CONFIG = """model = "{model}"
[planner]
enabled = false
[executor]
use_live = false
use_score = false
[mqtt]
keepalive = 2
connect_timeout_s = 60
[health]
interval_s = 0.5
"""


@dataclass(slots=True)
class _Sent:
    """The sender's record, per try: when it was sent (wall ns), its deadline (ms), acknowledged.

    A try is an event of its own (``s<n>``, numbered in sending order): one the broker did not
    acknowledge is followed by a new event with a new id and deadline, so each is judged
    against its own deadline.
    """

    at_ns: dict[str, int] = field(default_factory=dict)
    deadline_ms: dict[str, float] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)

    def due_ns(self, ident: str) -> int:
        return self.at_ns[ident] + round(self.deadline_ms[ident] * 1e6)


async def _sender(
    port: int, agent: str, n: int, hz: float, span_ms: tuple[float, float], sent: _Sent
) -> None:
    """Events at ``hz`` until ``n`` were acknowledged, each stamped as sent.

    A try the broker did not acknowledge (it went down) is followed by a new event in its
    slot, as a sensor sends a new reading.
    """
    rng = random.Random(7)
    loop = asyncio.get_running_loop()
    start = loop.time()
    i = tries = 0
    while i < n:
        with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
            async with aiomqtt.Client(
                "127.0.0.1", port, identifier=f"{agent}-sender", timeout=2.0, **_session()
            ) as client:
                while i < n:
                    delay = start + i / hz - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    ident, deadline = f"s{tries}", round(rng.uniform(*span_ms), 1)
                    tries += 1
                    at = time.time_ns()
                    # Recorded before the publish: the broker may take a try whose PUBACK an
                    # outage cuts, and an action for it is judged like any other.
                    sent.at_ns[ident], sent.deadline_ms[ident] = at, deadline
                    body = {"id": ident, "type": "heartbeat", "deadline_ms": deadline}
                    await client.publish(
                        Topics(agent).event("heartbeat"),
                        orjson.dumps({**body, "sent_at_ns": at}),
                        qos=1,
                        properties=expiry_properties(deadline),
                        timeout=2.0,
                    )
                    sent.acked.add(ident)
                    i += 1
        await asyncio.sleep(0.05)  # the broker is down: try again soon


@dataclass(slots=True)
class _Outcomes:
    """What came back: actions (with their receipt time) and refusals, per event id."""

    actions: dict[str, list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict)
    first_at_ns: dict[str, int] = field(default_factory=dict)
    """When the first action or refusal for each id came (wall clock)."""
    acted: dict[str, int] = field(default_factory=dict)
    dropped_late: int = 0
    """Actions the actuator did not act on: they arrived after their ``deadline_ns``, or were
    not ``met``."""
    ids: ActedIds = field(default_factory=lambda: ActedIds(window_s=60.0))
    received: int = 0
    """Actions and refusals so far: traffic from the agent says it is back after an outage
    (a retained status saved before a broker restart can say "online" early)."""

    def take_action(self, body: dict[str, Any], now_ns: int) -> None:
        self.received += 1
        ident = str(body.get("id"))
        self.actions.setdefault(ident, []).append((now_ns, body))
        self.first_at_ns.setdefault(ident, now_ns)
        deadline = body.get("deadline_ns")
        if not body.get("met") or deadline is None or now_ns > deadline:
            self.dropped_late += 1
            return
        if self.ids.first(ident, now=now_ns / 1e9):
            self.acted[ident] = now_ns

    def take_error(self, body: dict[str, Any], now_ns: int) -> None:
        self.received += 1
        if "error" in body and "id" in body:
            self.refusals.setdefault(str(body["id"]), str(body["error"]))
            self.first_at_ns.setdefault(str(body["id"]), now_ns)


async def _watch(port: int, agent: str, out: _Outcomes, ready: asyncio.Event) -> None:
    """Actions and refusals, across broker restarts (a persistent QoS 1 session)."""
    client = aiomqtt.Client("127.0.0.1", port, identifier=f"{agent}-actuator", **_session())
    while True:
        with contextlib.suppress(aiomqtt.MqttError):
            async with client:
                await client.subscribe(Topics(agent).actions, qos=1)
                await client.subscribe(Topics(agent).errors, qos=1)
                ready.set()
                async for m in client.messages:
                    now = time.time_ns()
                    body = orjson.loads(m.payload if isinstance(m.payload, bytes) else b"{}")
                    if m.topic.value.endswith("/actions"):
                        out.take_action(body, now)
                    else:
                        out.take_error(body, now)
        await asyncio.sleep(0.05)


def _figures(
    sent: _Sent, out: _Outcomes, outages: list[tuple[int, int]], faults: list[str]
) -> dict[str, Any]:
    ids = set(sent.at_ns)  # every try, acknowledged or not: an action for any is judged
    acked = sent.acked
    late = [
        i
        for i, got in out.actions.items()
        if i in ids and any(b.get("decided_at_ns", 0) > sent.due_ns(i) for _, b in got)
    ]
    met_late = [
        i
        for i, got in out.actions.items()
        if i in ids
        and any(b.get("met") and b.get("decided_at_ns", 0) > sent.due_ns(i) for _, b in got)
    ]
    acted_late = [i for i, at in out.acted.items() if i in ids and at > sent.due_ns(i)]
    missing = sorted(acked - set(out.actions) - set(out.refusals), key=lambda i: int(i[1:]))

    def in_outage(i: str) -> bool:
        """Whether a fault touched it: an outage overlapped its life, sent to due."""
        return any(a <= sent.due_ns(i) and sent.at_ns[i] <= b for a, b in outages)

    untouched = {i for i in acked if not in_outage(i)}
    acted_untouched = untouched & set(out.acted)

    # The broker drops an event whose Message Expiry passed in its queue (it waited more than
    # the interval): then the next later event to come back came that long after it was sent.
    came = sorted((int(i[1:]), at) for i, at in out.first_at_ns.items() if i in ids)
    next_came: dict[str, int] = {}
    k = 0
    for i in missing:
        while k < len(came) and came[k][0] <= int(i[1:]):
            k += 1
        if k < len(came):
            next_came[i] = came[k][1]
    expired_at_broker = [
        i
        for i in missing
        if not in_outage(i)
        and next_came.get(i, 0)
        > sent.at_ns[i] + expiry_interval_s(sent.deadline_ms[i]) * 1_000_000_000
    ]
    unexplained = [i for i in missing if not in_outage(i) and i not in set(expired_at_broker)]
    reasons: dict[str, int] = {}
    for ident, why in out.refusals.items():
        if ident in ids:
            kind = why.split(":", 1)[0]
            reasons[kind] = reasons.get(kind, 0) + 1
    return {
        "tries": len(ids),
        "acked": len(acked),
        "decided": len(set(out.actions) & ids),
        "acted": len(set(out.acted) & ids),
        # Among acknowledged events that no outage touched: the share acted on in time.
        "untouched": len(untouched),
        "acted_untouched": len(acted_untouched),
        "acted_share_untouched": round(len(acted_untouched) / len(untouched), 4)
        if untouched
        else None,
        # Why the rest were not acted on: refused (by reason), or the action came too late.
        "untouched_not_acted": _why_not_acted(untouched - acted_untouched, out),
        "untouched_not_acted_examples": sorted(
            untouched - acted_untouched, key=lambda i: int(i[1:])
        )[:10],
        "late_actions": len(late),
        "met_true_late": len(met_late),
        "acted_late": len(acted_late),
        "late_examples": late[:10],
        "refused": reasons,
        "expired_counted": reasons.get("expired", 0),
        "missing_in_outage": sum(map(in_outage, missing)),
        "expired_at_broker": len(expired_at_broker),
        "unexplained_missing": len(unexplained),
        "unexplained_examples": unexplained[:10],
        # Per unexplained id: the next fault after it was sent, and how long after (ms).
        "unexplained_before_fault_ms": _before_fault(unexplained[:20], sent, outages, faults),
        "dropped_by_actuator": out.dropped_late,
    }


def _why_not_acted(ids: set[str], out: _Outcomes) -> dict[str, int]:
    """Per reason, how many of ``ids`` were not acted on."""
    why: dict[str, int] = {}
    for i in ids:
        if i in out.refusals:
            kind = "refused " + out.refusals[i].split(":", 1)[0]
        elif i in out.actions:
            kind = "the action came after its deadline, or not met"
        else:
            kind = "nothing came"
        why[kind] = why.get(kind, 0) + 1
    return why


def _before_fault(
    ids: list[str], sent: _Sent, outages: list[tuple[int, int]], faults: list[str]
) -> dict[str, tuple[str, float] | None]:
    out: dict[str, tuple[str, float] | None] = {}
    for i in ids:
        after = [(a, f) for (a, _), f in zip(outages, faults, strict=True) if a >= sent.at_ns[i]]
        out[i] = (after[0][1], round((after[0][0] - sent.at_ns[i]) / 1e6, 1)) if after else None
    return out


async def _skews(port: int, agent: str, skews_ms: list[float], deadline_ms: float) -> Any:
    """Per sender clock offset (ms, + ahead): events decided met, refused, and why."""
    rows = []
    async with aiomqtt.Client(
        "127.0.0.1", port, identifier=f"{agent}-skew", protocol=aiomqtt.ProtocolVersion.V5
    ) as client:
        await client.subscribe(Topics(agent).actions, qos=1)
        await client.subscribe(Topics(agent).errors, qos=1)
        for k, skew in enumerate(skews_ms):
            ids = {f"k{k}-{j}" for j in range(5)}
            for ident in sorted(ids):
                body = {
                    "id": ident,
                    "type": "heartbeat",
                    "deadline_ms": deadline_ms,
                    "sent_at_ns": time.time_ns() + round(skew * 1e6),
                }
                await client.publish(Topics(agent).event("heartbeat"), orjson.dumps(body), qos=1)
            met = refused = 0
            why: set[str] = set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    async for m in client.messages:
                        b = orjson.loads(m.payload if isinstance(m.payload, bytes) else b"{}")
                        if b.get("id") not in ids:
                            continue
                        ids.discard(b["id"])
                        if "error" in b:
                            refused += 1
                            why.add(str(b["error"]).split(":", 1)[0])
                        else:
                            met += bool(b.get("met"))
                        if not ids:
                            break
            rows.append({"skew_ms": skew, "met": met, "refused": refused, "why": sorted(why)})
    return rows


async def _send_refusals(url: str, agent: str, rounds: int) -> list[float]:
    """Seconds ``forethought send --deadline-ms 0`` takes to raise the agent's refusal."""
    from forethought.commands._send import Refused, send_event  # noqa: PLC0415 - the CLI's own

    took = []
    for _ in range(rounds):
        t = time.perf_counter()
        with contextlib.suppress(Refused):
            await send_event(
                mqtt=url,
                agent_id=agent,
                event_type="heartbeat",
                params={},
                deadline_ms=0,
                wait_s=10.0,
            )
            raise AssertionError("the agent decided an event with deadline_ms 0")
        took.append(time.perf_counter() - t)
    return took


async def run_stale_events(
    model: str,
    *,
    agent_kills: int,
    broker_restarts: int,
    gap_s: tuple[float, float] = (2.0, 5.0),
    down_s: tuple[float, float] = (0.2, 1.5),
    hz: float = 50.0,
    deadlines_ms: tuple[float, float] = (200.0, 500.0),
    skews_ms: tuple[float, ...] = (-450, -300, -200, -150, -100, -50, 0, 50, 99, 101, 150, 300),
    refusal_rounds: int = 20,
    seed: int = 11,
) -> dict[str, Any]:
    """R11: the agent killed ``agent_kills`` times, the broker ``broker_restarts`` times."""
    rng = random.Random(seed)
    agent_id = "r11"
    sent, out = _Sent(), _Outcomes()
    statuses: list[tuple[float, Any]] = []
    outages: list[tuple[int, int]] = []
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory() as tmp, MosquittoBroker(persistent=True) as broker:
        spec, config = Path(tmp) / "spec.json", Path(tmp) / "agent.toml"
        spec.write_bytes(orjson.dumps(_SPEC))
        config.write_text(_CONFIG.format(model=model))
        cmd = _agent_command(spec, config, broker.url, agent_id)

        def start() -> subprocess.Popen[bytes]:
            return agent_process(cmd)

        def online_since(t: float) -> bool:
            return online_after(statuses, t)

        async with asyncio.TaskGroup() as tg:
            watch = tg.create_task(_status_watch(broker.port, agent_id, statuses), name="w")
            ready = asyncio.Event()
            act = tg.create_task(_watch(broker.port, agent_id, out, ready), name="act")
            await ready.wait()
            proc = start()
            t0 = loop.time()
            if await until(lambda: online_since(t0), 180.0) is None:
                raise RuntimeError("the agent did not come online within 180 s")
            order = ["agent"] * agent_kills + ["broker"] * broker_restarts
            rng.shuffle(order)
            gaps = [rng.uniform(*gap_s) for _ in order]
            # Sends until the faults are over (then cancelled): however long restarts take.
            sender = tg.create_task(
                _sender(broker.port, agent_id, 2**62, hz, deadlines_ms, sent), name="s"
            )
            rows = []
            for what, gap in zip(order, gaps, strict=True):
                await asyncio.sleep(gap)
                down_at, at = time.time_ns(), loop.time()
                if what == "agent":
                    proc.kill()
                    await asyncio.to_thread(proc.wait)
                    await asyncio.sleep(rng.uniform(*down_s))
                    again = loop.time()
                    proc = start()
                else:
                    broker.stop()
                    await asyncio.sleep(rng.uniform(*down_s))
                    again = loop.time()
                    await asyncio.to_thread(broker.start)
                mark = out.received
                back = await until(
                    lambda a=again, m=mark: online_since(a) and out.received > m, 180.0
                )
                outages.append((down_at, time.time_ns()))
                rows.append({"fault": what, "online_again_after_s": back and back + again - at})
            sender.cancel()
            await until(lambda: set(out.actions) | set(out.refusals) >= sent.acked, 10.0)
            skews = await _skews(broker.port, agent_id, list(skews_ms), 300.0)
            refusals = await _send_refusals(broker.url, agent_id, refusal_rounds)
            last = next((s for _, s in reversed(statuses) if "counters" in (s or {})), None)
            proc.terminate()
            await asyncio.to_thread(proc.wait)
            act.cancel()
            watch.cancel()
    refusals.sort()
    return {
        "agent_kills": agent_kills,
        "broker_restarts": broker_restarts,
        "hz": hz,
        "deadlines_ms": list(deadlines_ms),
        "events": len(sent.acked),
        **_figures(sent, out, outages, [str(r["fault"]) for r in rows]),
        "last_report_age_counters": last["counters"].get("age") if last else None,
        "skews": skews,
        "send_refusal_ms": {
            "rounds": len(refusals),
            "p50": round(statistics.median(refusals) * 1e3, 1),
            "max": round(refusals[-1] * 1e3, 1),
        },
        "rows": rows,
    }
