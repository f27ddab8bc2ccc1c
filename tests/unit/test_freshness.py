"""An event's age: what each way of arriving says, and what the agent does with it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from forethought import AgentConfig
from forethought.policies import ConfigError
from forethought.runtime import (
    Event,
    EventPayload,
    EventsConfig,
    Tier,
    expiry_interval_s,
    stamp_event,
)
from forethought.runtime._age import AgeSource, zenoh_sent_ns
from forethought.runtime._backlog import Backlog
from forethought.runtime._decision import late_reason
from forethought.runtime._event import Arrival, with_deadline
from forethought.runtime._freshness import Freshness

WALL = 1_800_000_000.0  # the wall clock at arrival, s
ARRIVAL = Arrival(at=100.0, wall_offset_s=100.0 - WALL)  # the loop's clock reads 100 s


TYPE_MS = 1000.0  # the event type's deadline, for an event whose sender gives none


def event(**payload: Any) -> Event:
    """An event arrived at loop time 100 s (wall ``WALL``), as a bus builds it, its deadline
    resolved as the agent resolves it at arrival."""
    extra = {k: payload.pop(k) for k in ("sent_ns", "expiry_s", "in_process") if k in payload}
    body = EventPayload.model_validate({"id": "e", "type": "ping", **payload})
    return with_deadline(Event.from_payload(body, arrival=ARRIVAL, **extra), TYPE_MS)


def ns(wall_s: float) -> int:
    return round(wall_s * 1e9)


def test_the_sender_s_deadline_is_kept_until_resolved_once_at_arrival() -> None:
    body = EventPayload.model_validate({"id": "e", "type": "ping", "deadline_ms": 300})
    raw = Event.from_payload(body, arrival=ARRIVAL, in_process=True)
    assert raw.deadline is None  # the bus resolves nothing: the agent does, once
    assert raw.deadline_ms == 300
    assert with_deadline(raw, TYPE_MS).deadline == pytest.approx(
        100.3
    )  # the sender's, not the type's
    no_budget = Event.from_payload(
        EventPayload.model_validate({"id": "f", "type": "ping"}), arrival=ARRIVAL, in_process=True
    )
    assert with_deadline(no_budget, TYPE_MS).deadline == pytest.approx(101.0)  # the type's
    resolved = with_deadline(raw, TYPE_MS)
    assert with_deadline(resolved, 5.0) is resolved  # resolved once: it stands


def test_a_relative_deadline_counts_from_when_the_event_was_sent() -> None:
    e = event(deadline_ms=300, sent_at_ns=ns(WALL - 0.2))
    assert e.age is AgeSource.SENT_AT_NS
    assert e.sent_at == pytest.approx(99.8)
    assert e.deadline == pytest.approx(100.1)  # 300 ms from sending, 100 ms after arrival
    zenoh = event(deadline_ms=300, sent_ns=ns(WALL - 0.25))
    assert zenoh.age is AgeSource.ZENOH_TIMESTAMP
    assert zenoh.deadline == pytest.approx(100.05)
    local = event(deadline_ms=300, in_process=True)
    assert local.age is AgeSource.IN_PROCESS
    assert local.deadline == pytest.approx(100.3)
    absolute = event(deadline_ns=ns(WALL + 0.5))
    assert absolute.age is AgeSource.DEADLINE_NS
    assert absolute.deadline == pytest.approx(100.5)
    unknown = event(deadline_ms=300)
    assert unknown.age is AgeSource.NONE
    assert unknown.deadline == pytest.approx(100.3)  # only under no_age = "trust"


def test_an_expired_event_is_refused_saying_how_long_it_waited() -> None:
    judge = Freshness(EventsConfig())
    verdict = judge.judge(event(deadline_ms=300, sent_at_ns=ns(WALL - 0.5)), now=100.001)
    assert verdict.refusal is not None
    assert verdict.refusal.startswith("expired: waited 500 ms before arrival and 1 ms in the ")
    assert "its deadline was 300 ms after it was sent" in verdict.refusal
    fresh = judge.judge(event(deadline_ms=300, sent_at_ns=ns(WALL - 0.1)), now=100.001)
    assert fresh.refusal is None
    late_ns = judge.judge(event(deadline_ns=ns(WALL - 0.04)), now=100.0)
    assert late_ns.refusal == "expired: arrived 40 ms after its deadline_ns"
    assert judge.stats.expired == 2


def test_a_clock_ahead_is_tolerated_up_to_max_future_ms_and_refused_beyond() -> None:
    judge = Freshness(EventsConfig(max_future_ms=100))
    ahead = event(deadline_ms=300, sent_at_ns=ns(WALL + 0.08))
    verdict = judge.judge(ahead, now=100.0)
    assert verdict.refusal is None
    assert verdict.event.deadline == pytest.approx(100.3)  # from arrival, never later
    beyond = judge.judge(event(deadline_ms=300, sent_at_ns=ns(WALL + 0.12)), now=100.0)
    assert beyond.refusal is not None
    assert beyond.refusal.startswith("from the future: sent 120 ms after it arrived")
    assert judge.stats.from_the_future == 1


@pytest.mark.parametrize("policy", ["refuse", "default_only", "trust"])
def test_an_event_of_unknown_age_is_never_silently_fresh(policy: str) -> None:
    judge = Freshness(EventsConfig(no_age=policy))  # type: ignore[arg-type]
    verdict = judge.judge(event(deadline_ms=300), now=100.0)
    if policy == "refuse":
        assert verdict.refusal is not None
        assert verdict.refusal.startswith("no age: nothing says when it was sent; give sent_at_ns")
        assert judge.stats.no_age == 1
    elif policy == "default_only":
        assert verdict.refusal is None
        assert verdict.event.default_only
        assert judge.stats.default_only == 1
    else:
        assert verdict.refusal is None
        assert not verdict.event.default_only
    assert EventsConfig().no_age == "refuse"


def test_max_age_and_the_mqtt_expiry_cap_the_deadline() -> None:
    judge = Freshness(EventsConfig(max_age_s=2.0))
    far = judge.judge(event(deadline_ns=ns(WALL + 3600), sent_at_ns=ns(WALL)), now=100.0)
    assert far.event.deadline == pytest.approx(102.0)
    capped = judge.judge(event(deadline_ms=5000, sent_at_ns=ns(WALL), expiry_s=1), now=100.0)
    assert capped.event.deadline == pytest.approx(102.0)  # 1 s left, rounded down by the broker
    assert expiry_interval_s(300) == 1
    assert expiry_interval_s(1000) == 1
    assert expiry_interval_s(1001) == 2


def test_a_decision_that_missed_says_why() -> None:
    arrived_late = event(deadline_ms=300, sent_at_ns=ns(WALL - 0.312))
    why = late_reason(arrived_late, Tier.TREE, now=100.0004, margin_ms=5.0)
    assert why == "late: selection 0.4 ms, but the event arrived 12.0 ms after its deadline"
    in_margin = late_reason(event(deadline_ms=3, in_process=True), Tier.TREE, 100.0, 5.0)
    assert "inside the 5 ms margin" in in_margin
    slow = late_reason(event(deadline_ms=100, in_process=True), Tier.LIVE, 100.2, 5.0)
    assert slow.startswith("late: live 200.0 ms, past the 95.0 ms left of its deadline")


def test_the_zenoh_timestamp_is_read_as_wall_nanoseconds() -> None:
    zenoh = pytest.importorskip("zenoh")
    from forethought.runtime import zenoh_config

    with zenoh.open(zenoh_config()) as session:
        before = time.time_ns()
        stamp = session.new_timestamp()
        after = time.time_ns()
    sent = zenoh_sent_ns(stamp)
    assert sent is not None
    assert before - 1_000_000 <= sent <= after + 1_000_000  # the same clock, within 1 ms
    assert zenoh_sent_ns(None) is None


def test_stamp_event_and_the_events_table() -> None:
    assert stamp_event({"id": "x"}, wall_ns=lambda: 7) == {"id": "x", "sent_at_ns": 7}
    cfg = AgentConfig.defaults(events={"no_age": "default_only", "max_age_s": 5})
    assert cfg.events.no_age == "default_only"
    with pytest.raises(ConfigError, match=r"events\.no_age"):
        AgentConfig.defaults(events={"no_age": "sometimes"})


async def test_a_latest_only_backlog_is_taken_newest_first() -> None:
    backlog = Backlog(frozenset({"pose"}), capacity=16)
    loop = asyncio.get_running_loop().time()
    arrival = Arrival(at=loop, wall_offset_s=loop - WALL)
    for i, kind in enumerate(["pose", "ping", "pose", "pose", "ping"]):
        body = EventPayload(id=f"{kind}{i}", type=kind, sent_at_ns=ns(WALL - 1))
        backlog.put(Event.from_payload(body, arrival=arrival))
    first, superseded = await backlog.take()
    assert first.id == "pose3"
    assert [e.id for e in superseded] == ["pose0", "pose2"]
    assert [(await backlog.take())[0].id for _ in range(2)] == ["ping1", "ping4"]
    assert len(backlog) == 0


@pytest.mark.parametrize("timestamping", [True, False])
async def test_a_zenoh_sample_says_when_it_was_sent_where_timestamping_is_on(
    timestamping: bool,
) -> None:
    """A put with only ``deadline_ms``: its publisher's timestamp is its age (decided in time);
    from a session without timestamping it has none, and is refused (``no_age = "refuse"``)."""
    zenoh = pytest.importorskip("zenoh")
    from forethought import Agent, AgentSpec
    from forethought.models import ScriptedBackend
    from forethought.runtime import ZenohBus, zenoh_config
    from forethought.testing import free_port, until_holds

    endpoint = f"tcp/127.0.0.1:{free_port()}"
    spec = AgentSpec.from_data(
        {
            "name": "z",
            "description": "A test robot.",
            "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}},
            "default_action": {"a": "stop"},
            "events": [{"type": "ping", "deadline_ms": 2000}],
        }
    )
    bus = ZenohBus(agent_id="zt", listen=[endpoint])
    async with Agent(spec, backend=ScriptedBackend(), bus=bus, config=AgentConfig()):
        config = zenoh_config(connect=[endpoint], timestamping=timestamping)
        session = await asyncio.to_thread(zenoh.open, config)
        try:
            answers = session.declare_subscriber("forethought/zt/*", zenoh.handlers.FifoChannel(64))
            events = session.declare_publisher("forethought/zt/events/ping")
            # The link is up and the agent's subscription known here: a put now reaches it.
            await until_holds(
                lambda: events.matching_status.matching, 10, "the agent's subscription"
            )
            events.put(b'{"id": "z1", "type": "ping", "deadline_ms": 2000}')
            got: dict[str, Any] = {}

            def answered() -> bool:
                sample = answers.try_recv()
                if sample is not None:
                    got.update(key=str(sample.key_expr), **orjson.loads(sample.payload.to_bytes()))
                return bool(got)

            await until_holds(answered, 10, "the agent's answer")
        finally:
            await asyncio.to_thread(session.close)
    if timestamping:
        assert got["key"].endswith("/actions"), got
        assert got["met"] is True
    else:
        assert got["key"].endswith("/errors"), got
        assert got["error"].startswith("no age: ")
