"""``forethought plan``: a planner worker for a fleet, until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import orjson

from forethought.policies import ConfigError
from forethought.runtime import AgentConfig
from forethought.runtime.internals import FleetWorker, backend_for
from forethought.sims import load_spec

__all__ = ["run_worker"]


async def run_worker(
    spec: Path,
    *,
    fleet: dict[str, Any],
    model: str | None,
    config: Path | None,
    worker_id: str,
) -> int:
    """Plan for the fleet ``fleet["url"]`` with ``model`` until stopped; prints its figures.

    ``fleet`` holds the command line's fleet settings (over the configuration's ``fleet``
    table and ``FORETHOUGHT_FLEET__*``).
    """
    cfg = AgentConfig.load(config)
    given = {k: v for k, v in fleet.items() if v is not None}
    settings = cfg.fleet.model_copy(update=given) if given else cfg.fleet
    if settings.url is None:
        raise ConfigError("--fleet", None, "give --fleet nats://host:port (or fleet.url)")
    settings = type(settings).model_validate(settings.model_dump())  # check the flags' values
    backend, choice = backend_for(model or cfg.planner_model or cfg.model, cfg)
    if choice is not None and choice.notice is not None:
        print(f"forethought: {choice.notice}", file=sys.stderr, flush=True)
    worker = FleetWorker(
        load_spec(spec),
        backend=backend,
        config=settings,
        worker_id=worker_id,
        planner=cfg.planner,
        tree_max_nodes=cfg.tree_max_nodes,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print(
            f"forethought: planner worker {worker_id!r} for fleet {settings.name!r} on "
            f"{settings.url}; model {worker.backend.model_id}",
            file=sys.stderr,
            flush=True,
        )
        await stop.wait()
        print("forethought: shutting down", file=sys.stderr, flush=True)
    s = worker.stats
    print(
        orjson.dumps(
            {
                "branches_planned": worker.planner.stats.branches,
                "written": s.written,
                "claimed_elsewhere": s.claimed_elsewhere,
                "offers_written": s.offers_written,
                "robots_seen": s.states,
            }
        ).decode(),
        flush=True,
    )
    return 0
