"""``forethought bench --backend URL``: the latency law on an inference server, side by side.

The same figures for the server and for the in-process model, measured in one run with the
variants interleaved round by round (medians over the rounds):

* **law** -- call time against output tokens (a string of forced length), fitted T = a + b N;
* **batch vs sequential** -- eight events in one call against eight calls one after another;
* **score vs generate** -- scoring the candidates against generating one action;
* **cancel** -- a call cut at its deadline: how far past the deadline it returned, and (server)
  how soon its slot was free again, against a plain request left to time out;
* **compact vs the server's JSON mode** (llama-server) -- our GBNF against the server's own
  ``json_schema`` grammar for the same action: tokens written and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import numpy as np

from forethought.models import ModelBackend, ServerBackend, TransformersBackend
from forethought.models.internals import Prompt
from forethought.policies import ActionSchema

from ._model import BENCH_ACTION

__all__ = ["run_server_bench"]

_CONTEXT = 'You control a warehouse robot.\n\nCurrent state: {"zone": "aisle", "load": 0}'
_EVENTS = [
    "obstacle ahead at 0.4 m",
    "path clear",
    "battery at 12 %",
    "human waving",
    "pallet dropped",
    "door closed",
    "aisle 4 blocked",
    "charger free",
]


def _note(chars: int) -> ActionSchema:
    return ActionSchema.from_json_schema(
        {
            "type": "object",
            "properties": {"note": {"type": "string", "minLength": chars, "maxLength": chars}},
            "required": ["note"],
        }
    )


async def _timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = await fn()
    return time.perf_counter() - t0, out


async def _idle_after(url: str) -> float:
    """Seconds until no slot of the llama-server at ``url`` is processing."""
    t0 = time.perf_counter()
    async with httpx.AsyncClient() as client:
        while time.perf_counter() - t0 < 30:
            slots = (await client.get(f"{url}/slots")).json()
            if not any(s.get("is_processing") for s in slots):
                break
            await asyncio.sleep(0.002)
    return time.perf_counter() - t0


class _Round:
    """One round of every measurement on one backend."""

    def __init__(
        self, backend: ModelBackend, schema: ActionSchema, lengths: tuple[int, ...]
    ) -> None:
        self.b = backend
        self.schema = schema
        self.lengths = lengths
        self.notes = {n: _note(n) for n in lengths}

    async def law(self) -> list[tuple[int, float]]:
        points = []
        for n, schema in self.notes.items():
            t0 = time.perf_counter()
            (g,) = await self.b.generate(
                "", [f"write {n} letters"], schema, deadline=math.inf, max_new_tokens=400
            )
            points.append((g.output_tokens, time.perf_counter() - t0))
        return points

    async def batching(self) -> tuple[float, float]:
        batch, _ = await _timed(
            lambda: self.b.generate(_CONTEXT, _EVENTS, self.schema, deadline=math.inf)
        )
        t0 = time.perf_counter()
        for e in _EVENTS:
            await self.b.generate(_CONTEXT, [e], self.schema, deadline=math.inf)
        return batch, time.perf_counter() - t0

    async def score_vs_generate(self, candidates: list[Any]) -> tuple[float, float]:
        score, _ = await _timed(
            lambda: self.b.score(_CONTEXT, _EVENTS[0], candidates, self.schema, deadline=math.inf)
        )
        generate, _ = await _timed(
            lambda: self.b.generate(_CONTEXT, [_EVENTS[0]], self.schema, deadline=math.inf)
        )
        return score, generate

    async def cancel(self, budget_s: float) -> tuple[float, str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget_s
        note = self.notes[max(self.lengths)]
        (g,) = await self.b.generate(
            "", ["a long note"], note, deadline=deadline, max_new_tokens=400
        )
        return loop.time() - deadline, g.status.value


async def _json_mode(url: str, prompt: list[int], schema: dict[str, Any]) -> dict[str, Any]:
    """The server's own ``json_schema`` grammar: tokens it writes and the time it takes."""
    body = {
        "prompt": prompt, "n_predict": 160, "json_schema": schema, "cache_prompt": True,
        "temperature": -1.0, "samplers": ["top_k"], "top_k": 1, "repeat_penalty": 1.0,
    }  # fmt: skip
    async with httpx.AsyncClient(timeout=60) as client:
        s, r = await _timed(lambda: client.post(f"{url}/completion", json=body))
    data = r.json()
    return {"tokens": int(data["tokens_predicted"]), "seconds": s, "text": data["content"]}


async def _timeout_slot(url: str, prompt: list[int], budget_s: float) -> float:
    """Seconds until the slot of a plain request, abandoned at ``budget_s``, is free."""
    body = {"prompt": prompt, "n_predict": 400, "ignore_eos": True, "cache_prompt": False}
    async with httpx.AsyncClient() as client:
        with contextlib.suppress(httpx.TimeoutException):
            await client.post(f"{url}/completion", json=body, timeout=budget_s)
    return await _idle_after(url)


def _median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3 if xs else math.nan


def _max_ms(xs: list[float]) -> float:
    return max(xs) * 1e3 if xs else math.nan


def _fit(points: list[tuple[int, float]]) -> dict[str, float]:
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    pred = intercept + slope * x
    ss = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else 1.0
    return {"step_ms": slope * 1e3, "intercept_ms": intercept * 1e3, "r2": r2}


async def _bench(
    url: str, local: TransformersBackend, *, quick: bool, say: Callable[[str], None]
) -> dict[str, Any]:
    schema = ActionSchema.from_json_schema(BENCH_ACTION)
    rounds = 3 if quick else 7
    lengths = (8, 48, 128) if quick else (8, 32, 64, 128, 192)
    candidates = [  # the model suite's eight candidates
        schema.validate({"action": a, "speed": v})
        for a, v in [
            ("stop", 0),
            ("slow_down", 0.5),
            ("continue", 1.0),
            ("turn_left", 0.5),
            ("turn_right", 0.5),
            ("reverse", 0.3),
            ("dock", 0.5),
            ("wait", 0),
        ]
    ]
    server = ServerBackend(url=url, poll_s=0)
    out: dict[str, Any] = {"url": url, "rounds": rounds, "candidates": len(candidates)}
    async with server, local:
        await server.prepare(schema)
        await local.prepare(schema)
        sides = {
            "in_process": _Round(local, schema, lengths),
            "server": _Round(server, schema, lengths),
        }
        law: dict[str, list[tuple[int, float]]] = {k: [] for k in sides}
        batch: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
        score: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
        over: dict[str, list[tuple[float, str]]] = {k: [] for k in sides}
        freed: list[float] = []
        for r in range(rounds):
            # Interleaved: each round runs every variant once, in alternating order.
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for name in order:
                side = sides[name]
                law[name] += await side.law()
                batch[name].append(await side.batching())
                score[name].append(await side.score_vs_generate(candidates))
                over[name].append(await side.cancel(0.5))
                if name == "server" and server.family == "llama-server":
                    freed.append(await _idle_after(url))
            say(f"round {r + 1}/{rounds} done")
        for name in sides:
            b = batch[name]
            s = score[name]
            out[name] = {
                "law": _fit(law[name]),
                "batch8_s": statistics.median(x for x, _ in b),
                "sequential8_s": statistics.median(y for _, y in b),
                "batch_speedup": statistics.median(y / x for x, y in b),
                "score_s": statistics.median(x for x, _ in s),
                "generate_s": statistics.median(y for _, y in s),
                "generate_over_score": statistics.median(y / x for x, y in s),
                # Only calls that started and were cut say how far past the deadline they went.
                "cancel_overshoot_ms": _median_ms([o for o, st in over[name] if st == "deadline"]),
                "cancel_overshoot_max_ms": _max_ms([o for o, st in over[name] if st == "deadline"]),
                "cancel_statuses": [st for _, st in over[name]],
            }
        if server.family == "llama-server":
            prefix, own = server.prompts.encode(Prompt(_CONTEXT, _EVENTS[0]), schema)
            prompt = prefix + own
            ours = await server.generate(_CONTEXT, [_EVENTS[0]], schema, deadline=math.inf)
            theirs = await _json_mode(url, prompt, schema.json_schema())
            out["server"]["compact_tokens"] = ours[0].output_tokens
            out["server"]["json_mode_tokens"] = theirs["tokens"]
            out["server"]["json_mode_text"] = theirs["text"]
            out["server"]["compact_text"] = ours[0].text
            plain = [await _timeout_slot(url, prompt, 0.25) for _ in range(rounds)]
            out["server"]["slot_free_after_cut_ms"] = statistics.median(freed) * 1e3
            out["server"]["slot_free_after_timeout_ms"] = statistics.median(plain) * 1e3
    return out


def run_server_bench(
    url: str, local: TransformersBackend, *, quick: bool, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Measure the server at ``url`` and the in-process ``local`` model side by side."""
    report = asyncio.run(_bench(url, local, quick=quick, say=say))
    say(f"{'':34s}{'in-process':>14s}{'server':>14s}")
    rows: list[tuple[str, Callable[[dict[str, Any]], float], str]] = [
        ("step ms (T vs N_out slope)", lambda d: d["law"]["step_ms"], ".2f"),
        ("intercept ms", lambda d: d["law"]["intercept_ms"], ".1f"),
        ("fit r2", lambda d: d["law"]["r2"], ".3f"),
        ("batch 8 s", lambda d: d["batch8_s"], ".3f"),
        ("sequential 8 s", lambda d: d["sequential8_s"], ".3f"),
        ("batch speed-up", lambda d: d["batch_speedup"], ".2f"),
        ("score s", lambda d: d["score_s"], ".3f"),
        ("generate s", lambda d: d["generate_s"], ".3f"),
        ("generate / score", lambda d: d["generate_over_score"], ".2f"),
        ("cancel overshoot ms (median)", lambda d: d["cancel_overshoot_ms"], ".1f"),
        ("cancel overshoot ms (max)", lambda d: d["cancel_overshoot_max_ms"], ".1f"),
    ]
    for label, get, fmt in rows:
        a, b = get(report["in_process"]), get(report["server"])
        say(f"{label:34s}{format(a, fmt):>14s}{format(b, fmt):>14s}")
    srv = report["server"]
    if "compact_tokens" in srv:
        say(
            f"compact GBNF: {srv['compact_tokens']} tokens {srv['compact_text']!r}; server "
            f"json_schema mode: {srv['json_mode_tokens']} tokens {srv['json_mode_text']!r}"
        )
        say(
            f"slot free after a cut stream: {srv['slot_free_after_cut_ms']:.0f} ms; after a "
            f"plain request timed out: {srv['slot_free_after_timeout_ms']:.0f} ms"
        )
    return report
