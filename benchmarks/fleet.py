"""The fleet benchmark: how fast a branch reaches every agent, and tree hits through a node loss.

On a real 3-node NATS JetStream cluster (R3 bucket) on this machine:

* **propagation**: a planner connection (on node 0) writes branches to the bucket with
  create-if-absent, as a worker does, one every ``--gap-ms``; three agents' fleet trees (one on
  each node) insert them into their local PolicyTrees. A branch's propagation time is its
  arrival in an agent's local tree (the agent's wall clock) minus its write time (the writer's
  stamp in the record, the same machine's clock). Several rounds; per round p50/p99 over every
  (branch, agent) pair.
* **tree hits through a node loss**: three agents decide events their trees answer, in turns,
  while node 1 is up (before), SIGKILLed (down), and restarted (after). The figure is each
  decision's time inside ``Agent.decide``: the tree hit never touches the network, so losing a
  node should not move it.

Writes docs/results/fleet.json (commit, date, machine, rounds) and docs/results/fleet.md from it.
Run: ``.venv/bin/python benchmarks/fleet.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import nats

from forethought.models import ScriptedBackend
from forethought.planner import PlannerConfig
from forethought.policies import AgentSpec, EventKey, PolicyNode, PolicyTree
from forethought.runtime import Agent, AgentConfig, FleetConfig, Tier
from forethought.runtime.fleet._record import BranchRecord, prompt_hash
from forethought.runtime.fleet._tree import FleetTree
from forethought.runtime.fleet._worker import ensure_fleet
from forethought.testing import NatsCluster, nats_server_path

ROOT = Path(__file__).resolve().parent.parent

SPEC = {
    "name": "fleet-bench",
    "description": "You steer a warehouse robot. Answer with the safest action.",
    "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]},
    "default_action": {"a": "stop"},
    "state": {"zone": "aisle"},
    "events": [{"type": "bump", "params": {"n": {"min": 0, "max": 255, "step": 1}},
                "deadline_ms": 500}],
}  # fmt: skip


def quantile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def propagation(
    cluster: NatsCluster, rounds: int, per_round: int, gap_s: float
) -> list[dict]:
    spec = AgentSpec.from_data(SPEC)
    schema = spec.action_schema()
    prompt = prompt_hash(spec.description, schema.fingerprint)
    fleet = FleetConfig(url=cluster.urls[0], name="bench", replicas=3)
    writer = await nats.connect(servers=[cluster.urls[0]])
    js = writer.jetstream()
    await ensure_fleet(js, fleet)
    kv = await js.key_value(fleet.names.tree)
    arrivals: dict[tuple[int, str], float] = {}
    trees = []
    for i, url in enumerate(cluster.urls):

        def seen(record: BranchRecord, at: float, agent: int = i) -> None:
            arrivals[int(record.node.key.param("n")), f"a{agent}"] = at - record.written_at

        cfg = fleet.model_copy(update={"url": url, "robot": f"a{i}"})
        tree = FleetTree(config=cfg, tree=PolicyTree(check=schema.validate), prompt=prompt,
                         on_branch=seen)  # fmt: skip
        trees.append(await tree.__aenter__())
    for t in trees:
        await asyncio.wait_for(t.caught_up.wait(), 30)
    out = []
    fp = spec.initial_state().fingerprint
    n = 0
    for r in range(rounds):
        first = n
        for _ in range(per_round):
            node = PolicyNode(fp, EventKey("bump", (("n", n),)), {"a": "go"}, '{"a":"go"}',
                              0.5, "bench", 0, 0.0, 0.0)  # fmt: skip
            record = BranchRecord.of(node, prompt=prompt, writer="bench")
            await kv.create(record.key, record.encode())
            n += 1
            await asyncio.sleep(gap_s)
        await asyncio.sleep(1.0)
        ms = [arrivals[k, f"a{a}"] * 1e3 for k in range(first, n) for a in range(3)
              if (k, f"a{a}") in arrivals]  # fmt: skip
        expected = (n - first) * 3
        out.append({"round": r, "writes": n - first, "deliveries": len(ms),
                    "missing": expected - len(ms), "p50_ms": quantile(ms, 0.5),
                    "p99_ms": quantile(ms, 0.99), "max_ms": max(ms)})  # fmt: skip
        print(f"propagation round {r}: {out[-1]}", flush=True)
    for t in trees:
        await t.__aexit__(None, None, None)
    await writer.close()
    return out


async def hits_through_kill(cluster: NatsCluster, phase_s: float) -> dict[str, dict]:
    spec = AgentSpec.from_data(SPEC)
    fleet = FleetConfig(url=cluster.url, name="hits", replicas=3)
    writer = await nats.connect(servers=[cluster.urls[0]])
    js = writer.jetstream()
    await ensure_fleet(js, fleet)
    kv = await js.key_value(fleet.names.tree)
    prompt = prompt_hash(spec.description, spec.action_schema().fingerprint)
    fp = spec.initial_state().fingerprint
    for n in range(64):
        node = PolicyNode(fp, EventKey("bump", (("n", n),)), {"a": "go"}, '{"a":"go"}', 0.5,
                          "bench", 0, 0.0, 0.0)  # fmt: skip
        record = BranchRecord.of(node, prompt=prompt, writer="bench")
        await kv.create(record.key, record.encode())
    await writer.close()
    agents = []
    for i in range(3):
        urls = cluster.urls[i:] + cluster.urls[:i]
        cfg = AgentConfig(
            fleet=fleet.model_copy(update={"url": ",".join(urls), "robot": f"a{i}"}),
            planner=PlannerConfig(enabled=False),  # the tree alone: what a hit costs
        )
        agent = Agent(spec, backend=ScriptedBackend(), config=cfg)
        agents.append(await agent.__aenter__())
    for agent in agents:
        assert agent.fleet is not None
        await asyncio.wait_for(agent.fleet.caught_up.wait(), 30)
    assert all(len(a.tree) == 64 for a in agents)
    phases: dict[str, list[float]] = {"before": [], "down": [], "after": []}
    tiers: dict[str, dict[str, int]] = {p: {} for p in phases}
    count = 0

    async def decide_for(phase: str) -> None:
        nonlocal count
        end = time.monotonic() + phase_s
        while time.monotonic() < end:
            for agent in agents:
                t0 = time.perf_counter()
                d = await agent.decide({"id": f"e{count}", "type": "bump",
                                        "params": {"n": count % 64}})  # fmt: skip
                phases[phase].append((time.perf_counter() - t0) * 1e6)
                tiers[phase][d.tier.value] = tiers[phase].get(d.tier.value, 0) + 1
                count += 1
            await asyncio.sleep(0.005)

    await decide_for("before")
    print("tree hits: node 1 SIGKILLed", flush=True)
    cluster.kill(1)
    await decide_for("down")
    print("tree hits: node 1 restarting", flush=True)
    restart = asyncio.ensure_future(asyncio.to_thread(cluster.start, 1))
    await decide_for("after")
    await restart
    print("tree hits: node 1 back", flush=True)
    for agent in agents:
        await agent.__aexit__(None, None, None)
    return {
        p: {"decisions": len(us), "tree_hits": tiers[p].get(Tier.TREE.value, 0),
            "p50_us": quantile(us, 0.5), "p99_us": quantile(us, 0.99)}
        for p, us in phases.items()
    }  # fmt: skip


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg()[0]
    return (
        f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"load average {load:.1f} at the start (a shared machine)"
    )


def markdown(data: dict) -> str:
    rows = "\n".join(
        f"| {r['round']} | {r['writes']} | {r['deliveries']} | {r['missing']} | "
        f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} |"
        for r in data["propagation"]
    )
    hits = "\n".join(
        f"| {p} | {h['decisions']} | {h['tree_hits']} | {h['p50_us']:.0f} | {h['p99_us']:.0f} |"
        for p, h in data["tree_hits"].items()
    )
    med = statistics.median(r["p99_ms"] for r in data["propagation"]) if rows else float("nan")
    return f"""# Fleet: propagation and tree hits through a node loss

Generated by `benchmarks/fleet.py` from `fleet.json`. Commit {data["commit"]}, {data["date"]},
{data["machine"]}; {data["nats_server"]}; {data["rounds"]} rounds of
{data["per_round"]} branch writes, one every {data["gap_ms"]} ms.

A 3-node NATS JetStream cluster on this machine, the tree bucket replicated three times. A
writer on node 0 writes each branch as a planner worker does (create-if-absent); three agents,
one on each node, watch the bucket into their local trees. Propagation: a branch's arrival in
an agent's local tree minus its write time, over every (branch, agent) pair.

| round | writes | deliveries | missing | p50 ms | p99 ms | max ms |
|---|---|---|---|---|---|---|
{rows}

Median over rounds of the p99: **{med:.1f} ms** (target: 100 ms).

Tree hits while node 1 is up, SIGKILLed, and restarted ({data["phase_s"]} s each, three
agents deciding in turns; time inside `Agent.decide`):

| phase | decisions | tree hits | p50 µs | p99 µs |
|---|---|---|---|---|
{hits}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    parser.add_argument("--phase-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument(
        "--render", action="store_true", help="only write fleet.md from the existing fleet.json"
    )
    args = parser.parse_args()
    if args.render:
        data = json.loads((args.out / "fleet.json").read_text())
        (args.out / "fleet.md").write_text(markdown(data))
        return
    with NatsCluster(size=3) as cluster:
        prop = asyncio.run(propagation(cluster, args.rounds, args.per_round, args.gap_ms / 1e3))
        hits = asyncio.run(hits_through_kill(cluster, args.phase_s))
    exe = nats_server_path() or "nats-server"
    version = subprocess.run(
        [exe, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    data = {
        "title": "Fleet: propagation and tree hits through a node loss",
        "command": "python benchmarks/fleet.py",
        "generator": "benchmarks/fleet.py",  # it writes its own page, from this file
        "profile": "none: NATS propagation and tree selection, no model",
        "commit": commit,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "nats_server": version,
        "rounds": args.rounds,
        "per_round": args.per_round,
        "gap_ms": args.gap_ms,
        "phase_s": args.phase_s,
        "propagation": prop,
        "tree_hits": hits,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "fleet.md").write_text(markdown(data))
    print(markdown(data))


if __name__ == "__main__":
    main()
