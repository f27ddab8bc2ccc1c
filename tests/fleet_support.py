"""Helpers of the fleet tests: the spec, starting agents and workers, waiting for a fleet."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import nats
from nats.js.errors import NoKeysError
from nats.js.kv import KeyValue
from robot_spec import robot_spec

from forethought.models import ModelBackend, TransformersBackend
from forethought.planner import PlannerConfig
from forethought.policies import AgentSpec, EventKey
from forethought.runtime import Agent, AgentConfig, FleetConfig
from forethought.runtime.fleet._record import decode_key
from forethought.runtime.fleet._worker import FleetWorker
from forethought.testing import until_holds

SPEC = robot_spec(
    "fleet-test",
    events=[
        {
            "type": "obstacle",
            "params": {"side": ["left", "right"]},
            "deadline_ms": 800,
            "weight": 3,
            "effects": {"zone": "blocked"},
        },
        {"type": "battery_low", "params": {"level": [0.1, 0.2]}, "deadline_ms": 3000},
        {"type": "clear", "deadline_ms": 1000, "effects": {"zone": "aisle"}},
    ],
    state={"zone": "aisle", "battery": 0.9},
)

EVENTS = [
    {"type": "obstacle", "params": {"side": "left"}},
    {"type": "battery_low", "params": {"level": 0.1}},
    {"type": "battery_low", "params": {"level": 0.2}},
]
"""Events that leave the state as it is (the initial state's branches answer them)."""


def spec() -> AgentSpec:
    return AgentSpec.from_data(SPEC)


def tiny(model_dir: Path) -> TransformersBackend:
    """A backend of its own on the tiny model (each worker and agent needs one)."""
    return TransformersBackend(model=str(model_dir), device="cpu", dtype="float32")


def worker(
    fleet: FleetConfig, backend: ModelBackend, worker_id: str, *, horizon: int = 4
) -> FleetWorker:
    return FleetWorker(
        spec(),
        backend=backend,
        config=fleet,
        worker_id=worker_id,
        planner=PlannerConfig(horizon=horizon, max_new_tokens=12),
    )


@contextlib.asynccontextmanager
async def agents(
    fleet: FleetConfig,
    urls: list[str],
    backends: list[ModelBackend],
    *,
    plan: bool = False,
) -> AsyncIterator[list[Agent]]:
    """One agent per backend, each connected to ``urls[i % len(urls)]`` first."""
    async with contextlib.AsyncExitStack() as stack:
        out = []
        for i, backend in enumerate(backends):
            config = AgentConfig(
                fleet=fleet.model_copy(
                    update={"robot": f"r{i}", "url": ",".join(urls[i:] + urls[:i])}
                ),
                # The tests' robots decide every 20 ms: a branch's cost (the live answers its
                # model time displaces) would keep a cut-off robot on a CPU model from
                # planning at all, and these tests are about where it plans, not whether.
                planner=PlannerConfig(enabled=plan, horizon=2, max_new_tokens=12, cost_weight=0),
            )
            out.append(
                await stack.enter_async_context(Agent(spec(), backend=backend, config=config))
            )
        yield out


async def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    await until_holds(check, timeout_s, what)


async def bucket(url: str, fleet: FleetConfig) -> dict[tuple[str, EventKey], int]:
    """The bucket as a fresh client reads it: each branch and how many writes its key holds."""
    nc = await nats.connect(servers=url.split(","), **_auth(fleet))
    try:
        js = nc.jetstream()
        kv = await js.key_value(fleet.names.tree)
        try:
            keys = await kv.keys()
        except NoKeysError:
            # nats-py raises on an empty bucket rather than listing nothing.
            return {}
        out = {}
        for key in keys:
            out[decode_key(key)] = len(await _history(kv, key))
        return out
    finally:
        await nc.close()


async def bucket_holding(
    url: str, fleet: FleetConfig, keys: set[tuple[str, EventKey]], timeout_s: float
) -> dict[tuple[str, EventKey], int]:
    """The bucket once it holds ``keys``: offers are written one by one as they arrive, so
    the first one written says nothing of the rest.

    A read the cluster cannot answer yet (after all its nodes restarted, its JetStream
    leaders are elected again only after a while: the stream-info request times out) counts
    as not holding them yet, until ``timeout_s``; so does an empty read, which a node that
    rejoined before catching up gives.
    """
    read: dict[tuple[str, EventKey], int] | None = None

    async def holding() -> bool:
        nonlocal read
        try:
            read = await bucket(url, fleet)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            return False
        return keys <= set(read)

    try:
        # A read costs the cluster a listing and a history per key: four a second are enough.
        await until_holds(holding, timeout_s, "the bucket to hold the branches", every_s=0.25)
    except AssertionError:
        if read is None:  # never answered: the cluster's own error says why
            await bucket(url, fleet)
            raise
        missing = sorted(keys - set(read), key=str)
        raise AssertionError(f"the bucket still lacks {len(missing)} branches: {missing}") from None
    assert read is not None
    return read


async def _history(kv: KeyValue, key: str) -> list[KeyValue.Entry]:
    """A listed key's history. Its watch can come back empty while the cluster settles (a
    node that just rejoined answers before it has caught up: seen as NoKeysError for a key
    ``keys()`` had just listed), so an empty read is tried again for a few seconds."""
    entries: list[KeyValue.Entry] = []

    async def listed() -> bool:
        with contextlib.suppress(NoKeysError):
            entries.extend(await kv.history(key))
            return True
        return False

    try:
        await until_holds(listed, 4.0, f"the history of {key}", every_s=0.1)
    except AssertionError:
        return await kv.history(key)  # its NoKeysError says what is wrong
    return entries


def _auth(fleet: FleetConfig) -> dict[str, object]:
    options = fleet.connect_options()
    options.pop("servers")
    return options


async def settled(workers: list[FleetWorker], quiet_s: float = 1.0, timeout_s: float = 60) -> None:
    """Wait until every worker has slept with nothing left to write for ``quiet_s``."""
    loop = asyncio.get_running_loop()
    quiet_since: float | None = None

    def quiet() -> bool:
        nonlocal quiet_since
        # Sleeping is not done: a planner backing off after a failed round sleeps too.
        idle = all(
            w.planner.sleeping and not w.pending_writes and not w.planner.pending_retries
            for w in workers
        )
        now = loop.time()
        if not idle:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        return quiet_since is not None and now - quiet_since >= quiet_s

    await until_holds(quiet, timeout_s, "the workers to settle", every_s=0.05)
