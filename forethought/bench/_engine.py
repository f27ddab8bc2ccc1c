"""``forethought bench --suite engine``: the local engines side by side, the floor beside them.

One run, every variant interleaved round by round (the order rotates), medians over rounds:

* **t_step** -- the slope of call time against output tokens (a note of forced length), for the
  in-process torch decoder, the managed llama-server (private socket, supervised) and a plain
  llama-server on a loopback port (the same build, started by hand: the baseline);
* **the floor** -- a copy kernel measures the machine's memory bandwidth each round; a decode
  step reads every weight once, so t_step cannot beat (model bytes) / (bandwidth): the GGUF's
  size for llama.cpp, the loaded tensors' for torch;
* **score 8 / generate 1** on the managed engine -- scoring eight candidates (one request over
  their token trie, and one request per candidate for comparison) against generating one
  compact action;
* **branches/s at 1, 4, 8, 16 in flight** -- one planner batch of that many events on the
  managed engine (its parallel slots, prompts cached);
* **back after SIGKILL** -- the managed server killed a few times: seconds until it answers.
"""

from __future__ import annotations

import asyncio
import math
import os
import platform
import signal
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from forethought.models import (
    ManagedServerBackend,
    ModelBackend,
    ServerBackend,
    TransformersBackend,
)
from forethought.models.internals import resolve_model
from forethought.policies import ActionSchema
from forethought.testing import LlamaServer

from ._model import BENCH_ACTION
from ._server import _CONTEXT, _note

__all__ = ["memory_bandwidth", "run_engine_bench"]

_EVENTS = [
    "obstacle ahead at 0.4 m", "path clear", "battery at 12 %", "human waving",
    "pallet dropped", "door closed", "aisle 4 blocked", "charger free",
    "forklift crossing", "spill on the floor", "shelf 9 empty", "dock 2 free",
    "alarm in zone B", "light curtain tripped", "wifi lost", "order cancelled",
]  # fmt: skip
_IN_FLIGHT = (1, 4, 8, 16)
_LENGTHS = (8, 32, 96)
_CANDIDATES = [
    ("stop", 0), ("slow_down", 0.5), ("continue", 1.0), ("turn_left", 0.5),
    ("turn_right", 0.5), ("reverse", 0.3), ("dock", 0.5), ("wait", 0),
]  # fmt: skip


def memory_bandwidth(megabytes: int = 256, reps: int = 5) -> float:
    """Bytes per second a plain copy moves (read + write), the median of ``reps`` copies."""
    src = np.ones(megabytes * 2**20 // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch: page faults are not bandwidth
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return 2 * src.nbytes / statistics.median(times)


async def _law(backend: ModelBackend, notes: dict[int, ActionSchema]) -> float:
    """Seconds per output token: the slope of call time against tokens written.

    One untimed call comes first: an engine's first call in a round pays what the work before
    it left behind (the managed server saves its idle slots to its prompt cache when the next
    task starts; torch finds its caches cold), once, and on whichever point came first, which
    bent the slope (to below zero in one round).
    """
    first = next(iter(notes.values()))
    await backend.generate("", ["write a note"], first, deadline=math.inf, max_new_tokens=400)
    points = []
    for n, schema in notes.items():
        t0 = time.perf_counter()
        (g,) = await backend.generate(
            "", [f"write {n} letters"], schema, deadline=math.inf, max_new_tokens=400
        )
        points.append((g.output_tokens, time.perf_counter() - t0))
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    return float(np.polyfit(x, y, 1)[0])


async def _timed(call: Awaitable[Any]) -> float:
    """Seconds ``call`` (a coroutine not yet started) takes."""
    t0 = time.perf_counter()
    await call
    return time.perf_counter() - t0


def _torch_bytes(backend: TransformersBackend) -> int:
    model = backend.loaded.model
    return int(sum(p.numel() * p.element_size() for p in model.parameters()))


def _machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in load],
    }


def _commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


async def _back_after_kill(engine: ManagedServerBackend, times: int) -> list[float]:
    """SIGKILL the managed server ``times`` times; seconds until each restart answered."""
    stats = engine.process.stats
    for _ in range(times):
        pid = engine.process.pid
        assert pid is not None
        before = stats.restarts
        os.kill(pid, signal.SIGKILL)
        async with asyncio.timeout(120):
            await engine.process.wait_restarts(before + 1)
    return list(stats.back_s)


async def _bench(model: str, rounds: int, say: Callable[[str], None]) -> dict[str, Any]:
    schema = ActionSchema.from_json_schema(BENCH_ACTION)
    notes = {n: _note(n) for n in _LENGTHS}
    cands = [schema.validate({"action": a, "speed": v}) for a, v in _CANDIDATES]
    gguf = resolve_model(model).location
    decoder = TransformersBackend(model=model, device="cpu")
    decoder.load()
    slots = max(_IN_FLIGHT)
    managed = ManagedServerBackend(model=model, slots=slots, context=slots * 512)
    with LlamaServer(model=model, slots=slots, context=slots * 512) as plain_proc:
        plain = ServerBackend(url=plain_proc.url, poll_s=0)
        async with decoder, managed, plain:
            each = ServerBackend(
                url=f"http://engine#tokenizer={model}",
                transport=managed.process.transport(),
                trie_scoring=False,
                poll_s=0,
            )
            async with each:
                engines: dict[str, ModelBackend] = {
                    "torch": decoder,
                    "managed": managed,
                    "plain": plain,
                }
                for b in (*engines.values(), each):
                    await b.prepare(schema)
                for b in engines.values():  # a discarded round: grammars compiled, caches warm
                    await _law(b, notes)
                step: dict[str, list[float]] = {k: [] for k in engines}
                bandwidth: list[float] = []
                score_trie: list[float] = []
                score_each: list[float] = []
                generate1: list[float] = []
                flight: dict[int, list[float]] = {n: [] for n in _IN_FLIGHT}
                for r in range(rounds):
                    bandwidth.append(await asyncio.to_thread(memory_bandwidth))
                    names = list(engines)
                    names = names[r % len(names) :] + names[: r % len(names)]  # rotate
                    for name in names:
                        step[name].append(await _law(engines[name], notes))
                    # Each call its own event (the state's prefix is cached for all three): a
                    # call must not find its whole prompt cached by the one before it.
                    e1, e2, e3 = (_EVENTS[(3 * r + i) % len(_EVENTS)] for i in range(3))
                    generate1.append(
                        await _timed(managed.generate(_CONTEXT, [e1], schema, deadline=math.inf))
                    )
                    score_trie.append(
                        await _timed(managed.score(_CONTEXT, e2, cands, schema, deadline=math.inf))
                    )
                    score_each.append(
                        await _timed(each.score(_CONTEXT, e3, cands, schema, deadline=math.inf))
                    )
                    for n in _IN_FLIGHT:
                        # A new state per round and size: nothing cached from an earlier batch.
                        context = f"{_CONTEXT}\nround {r} batch {n}"
                        seconds = await _timed(
                            managed.generate(context, _EVENTS[:n], schema, deadline=math.inf)
                        )
                        flight[n].append(n / seconds)
                    say(f"round {r + 1}/{rounds} done")
                rescored = managed.server.stats.trie_rescored
            back = await _back_after_kill(managed, 5)
        bw = statistics.median(bandwidth)
        gguf_bytes = await asyncio.to_thread(os.path.getsize, gguf)
        torch_bytes = _torch_bytes(decoder)
        med = {k: statistics.median(v) for k, v in step.items()}
        ratio = {
            "managed_over_plain": statistics.median(
                m / p for m, p in zip(step["managed"], step["plain"], strict=True)
            ),
            "torch_over_managed": statistics.median(
                t / m for t, m in zip(step["torch"], step["managed"], strict=True)
            ),
        }
        rate = {n: statistics.median(v) for n, v in flight.items()}
    floor_gguf = gguf_bytes / bw
    return {
        "rounds": rounds,
        "model": model,
        "torch_dtype": decoder.loaded.dtype,
        "bandwidth_gb_s": bw / 1e9,
        "bandwidth_rounds_gb_s": [b / 1e9 for b in bandwidth],
        "model_bytes": {"gguf": gguf_bytes, "torch": torch_bytes},
        "t_step_ms": {k: v * 1e3 for k, v in med.items()},
        "t_step_rounds_ms": {k: [x * 1e3 for x in v] for k, v in step.items()},
        "floor_ms": {"llama_cpp": floor_gguf * 1e3, "torch": torch_bytes / bw * 1e3},
        "ratios": {
            **ratio,
            "managed_over_floor": med["managed"] / floor_gguf,
            "torch_over_its_floor": med["torch"] / (torch_bytes / bw),
        },
        "score8_trie_s": statistics.median(score_trie),
        "score8_each_s": statistics.median(score_each),
        "generate1_s": statistics.median(generate1),
        "score8_over_generate1": statistics.median(
            s / g for s, g in zip(score_trie, generate1, strict=True)
        ),
        "score8_each_over_generate1": statistics.median(
            s / g for s, g in zip(score_each, generate1, strict=True)
        ),
        "trie_rescored": rescored,
        "branches_per_s": {str(n): v for n, v in rate.items()},
        "branches_per_s_over_1": {str(n): v / rate[1] for n, v in rate.items()},
        "back_after_sigkill_s": back,
    }


def run_engine_bench(
    *,
    model: str,
    rounds: int,
    json_path: Path | None,
    sim: Callable[[], dict[str, Any]] | None = None,
    command: str = "forethought bench --suite engine",
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Measure the engines side by side (and ``sim``'s figures, if given); write the JSON.

    The JSON names what it is and how it was made (``command``: the command line that ran
    this), as every file under docs/results must; ``benchmarks/engine_md.py`` renders it.
    """
    started = datetime.now(UTC)
    report: dict[str, Any] = {
        "suite": "engine",
        "title": "The local engines, side by side",
        "profile": "none (real time: every engine timed on this machine)",
        "command": command,
        "generator": "benchmarks/engine_md.py",
        "commit": _commit(),
        "date": started.isoformat(timespec="seconds"),
        "machine": _machine(),
    }
    report |= asyncio.run(_bench(model, rounds, say))
    t = report["t_step_ms"]
    f = report["floor_ms"]
    say(f"memory bandwidth (copy, read + write): {report['bandwidth_gb_s']:.2f} GB/s")
    say(f"t_step ms (median of {rounds} interleaved rounds):")
    say(f"  torch decoder      {t['torch']:8.2f}   its floor {f['torch']:.2f}")
    say(f"  managed engine     {t['managed']:8.2f}   floor {f['llama_cpp']:.2f}")
    say(f"  plain llama-server {t['plain']:8.2f}")
    r = report["ratios"]
    say(
        f"managed / plain {r['managed_over_plain']:.2f}; managed / floor "
        f"{r['managed_over_floor']:.2f}; torch / managed {r['torch_over_managed']:.2f}"
    )
    say(
        f"score 8 / generate 1: {report['score8_over_generate1']:.2f} (trie), "
        f"{report['score8_each_over_generate1']:.2f} (one request per candidate)"
    )
    rates = report["branches_per_s"]
    say("branches/s in flight: " + ", ".join(f"{n}: {v:.1f}" for n, v in rates.items()))
    back = report["back_after_sigkill_s"]
    say(f"back after SIGKILL: {', '.join(f'{b:.2f}' for b in back)} s")
    if sim is not None:
        report["sim"] = sim()
    report["seconds"] = (datetime.now(UTC) - started).total_seconds()
    report["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        say(f"wrote {json_path}")
    return report
