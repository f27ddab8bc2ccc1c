"""llama-server's decode step by thread count, beside the floor: docs/results/llama-threads.json.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/llama_threads.py [--rounds 3]
    .venv/bin/python scripts/docs_pages.py   # renders llama-threads.md

The floor of ``forethought bench --suite engine`` assumes the step is bound by memory: model
bytes read per step over what a copy kernel moves. This asks whether it is. Each round starts
our llama-server build on one slot with 1 thread, then with 2 (the order rotates), and takes
t_step as the slope of call time over 64 more output tokens (the medians of 3 calls of 8 and 3
of 72 tokens, ``ignore_eos``, the prompt cached); the copy kernel runs each round too. If one
thread reads the weights far slower than one core copies memory, and a second thread cuts the
step, the step is bound by compute, and no setting of ours brings it to the floor.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from forethought.bench._engine import _commit, _machine, memory_bandwidth
from forethought.models import DEFAULT_MODEL
from forethought.models._model_source import resolve_model
from forethought.testing import LlamaServer

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "results" / "llama-threads.json"
_SHORT, _LONG, _CALLS = 8, 72, 3
_PROMPT = "Write a long story about a warehouse robot."


def _call(client: httpx.Client, url: str, tokens: int) -> float:
    body = {
        "prompt": _PROMPT,
        "n_predict": tokens,
        "ignore_eos": True,
        "cache_prompt": True,
        "temperature": 0,
    }
    t0 = time.perf_counter()
    client.post(f"{url}/completion", json=body).raise_for_status()
    return time.perf_counter() - t0


def t_step_s(model: str, threads: int) -> float:
    """Seconds per decode step of a fresh one-slot llama-server on ``threads`` threads."""
    with (
        LlamaServer(model=model, slots=1, threads=threads) as server,
        httpx.Client(timeout=120) as client,
    ):
        _call(client, server.url, _SHORT)  # untimed: the prompt is cached, the caches warm
        short: list[float] = []
        long: list[float] = []
        for _ in range(_CALLS):  # interleaved, so a drift in the machine hits both lengths
            short.append(_call(client, server.url, _SHORT))
            long.append(_call(client, server.url, _LONG))
    return (statistics.median(long) - statistics.median(short)) / (_LONG - _SHORT)


def _reading(one_thread_read: float, bandwidth: float, one: float, two: float) -> str:
    """What the figures say, from the figures: compute-bound only if both signs are there."""
    said = (
        f"One thread reads the weights at {one_thread_read / 1e9:.1f} GB/s, where one core copies "
        f"{bandwidth / 1e9:.1f} GB/s; a second thread takes the step from {one * 1e3:.1f} to "
        f"{two * 1e3:.1f} ms ({one / two:.2f} times faster)."
    )
    if one_thread_read < bandwidth / 2 and one / two > 1.3:
        return said + (
            " A step bound by memory would not leave most of one core's bandwidth unused, so "
            "on this machine llama.cpp's step is bound by compute (dequantizing and "
            "multiplying), and the floor is out of its reach."
        )
    return said + " These figures do not show a step bound by compute."


def measure(model: str, rounds: int) -> dict[str, Any]:
    """Interleaved rounds of 1 and 2 threads and the copy kernel; the figures as a results page."""
    gguf_bytes = Path(resolve_model(model).location).stat().st_size
    steps: dict[int, list[float]] = {1: [], 2: []}
    bandwidth: list[float] = []
    order = [1, 2]
    for r in range(rounds):
        bandwidth.append(memory_bandwidth())
        for threads in order:
            steps[threads].append(t_step_s(model, threads))
            print(f"round {r + 1}/{rounds}: {threads} thread(s) {steps[threads][-1] * 1e3:.2f} ms")
        order.reverse()
    bw = statistics.median(bandwidth)
    floor_s = gguf_bytes / bw
    rows = []
    for threads, got in steps.items():
        step = statistics.median(got)
        rows.append(
            [
                str(threads),
                f"{step * 1e3:.2f}",
                ", ".join(f"{s * 1e3:.2f}" for s in got),
                f"{gguf_bytes / step / 1e9:.1f}",
                f"{step / floor_s:.2f}",
            ]
        )
    one, two = (statistics.median(steps[t]) for t in (1, 2))
    machine = _machine()
    return {
        "title": "llama-server's decode step by thread count, beside the bandwidth floor",
        "commit": _commit(),
        "date": datetime.date.today().isoformat(),
        "machine": f"{machine['cpu']}, {machine['cores']} cores, {machine['platform']}",
        "profile": "none (real time)",
        "rounds": rounds,
        "command": "benchmarks/llama_threads.py",
        "intro": (
            f"Our llama-server build, one slot, serving `{model}` "
            f"(GGUF {gguf_bytes / 1e6:.1f} MB). t_step: the slope of call time over "
            f"{_LONG - _SHORT} more output tokens (medians of {_CALLS} calls at each length), "
            f"one fresh server per thread count per round, the order rotating; medians over "
            f"{rounds} rounds. Floor: GGUF bytes / the copy kernel's bandwidth "
            f"({bw / 1e9:.1f} GB/s, one thread, read + write) = {floor_s * 1e3:.2f} ms."
        ),
        "columns": ["threads", "t_step ms", "each round ms", "weights read GB/s", "/ floor"],
        "rows": rows,
        "notes": _reading(gguf_bytes / one, bw, one, two),
    }


def main() -> int:
    """Measure, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=TARGET)
    args = parser.parse_args()
    report = measure(args.model, args.rounds)
    args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
