"""The ``forethought`` command line: its parser, and the dispatch to each subcommand.

The subcommands live in :mod:`forethought.commands`, one module each, imported when their
subcommand runs.

Errors Forethought raises on purpose print one line (``error: ...``) and exit 2: a user of the
CLI never sees a traceback for bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from forethought.policies import ConfigError, ForethoughtError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    # Declarative and long: every flag of every command, in the order `--help` shows them.
    parser = argparse.ArgumentParser(
        prog="forethought",
        description="Act on LLM decisions within hard deadlines.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser(
        "bench", help="measure the latency law and each optimisation on this device"
    )
    bench.add_argument(
        "--model",
        default=None,
        help="alias, local directory, .gguf file or cached Hugging Face id "
        "(default: the embedded smollm2-135m)",
    )
    bench.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    bench.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    bench.add_argument("--grammar", default="llguidance", choices=["llguidance", "xgrammar"])
    bench.add_argument(
        "--quick",
        action="store_true",
        help="fewer rounds and sweep points: several minutes on a 2-core CPU (the full run "
        "much longer); progress shows on a terminal",
    )
    bench.add_argument(
        "--backend",
        default=None,
        metavar="URL",
        help="an inference server (llama-server, vLLM, SGLang): its figures beside in-process",
    )
    bench.add_argument(
        "--suite",
        default="model",
        choices=["model", "planner", "executor", "engine", "all"],
        help="model: the latency law and model layer; planner: the idle-time planner; "
        "executor: the critical path while the planner is busy; engine: torch vs the managed "
        "llama-server vs a plain one beside the bandwidth floor (not part of all)",
    )
    bench.add_argument(
        "--rounds", type=int, default=5, help="engine: interleaved rounds (medians over them)"
    )
    bench.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="also write the figures as JSON"
    )
    _add_run(sub)
    _add_send(sub)
    _add_check(sub)
    _add_plan(sub)
    sim = sub.add_parser(
        "sim", help="replay a scenario: live-naive, live, tree, hybrid side by side, with reports"
    )
    sim.add_argument("scenario", type=Path, nargs="?", help="scenario file (YAML or JSON)")
    sim.add_argument(
        "--strategy", default="all", help="all, or a comma list of live-naive, live, tree, hybrid"
    )
    sim.add_argument(
        "--matrix",
        action="store_true",
        help="every shipped scenario (or the one given) under every shipped profile: one table",
    )
    sim.add_argument("--seed", type=int, default=None, help="seeds the charged model time")
    sim.add_argument(
        "--clock",
        default="virtual",
        choices=["virtual", "real", "both"],
        help="both: the virtual clock (profile measured here, unless --profile) and the real "
        "one, and the gap per strategy and figure",
    )
    sim.add_argument("--speed", type=float, default=1.0, help="compress time (real clock)")
    sim.add_argument(
        "--profile",
        default=None,
        help="simulated device: a shipped profile (cpu-2core-smollm2, design-note-gpu, gpu-8b, "
        "cpu-8b-q4), cpu-measured, or figures step_ms=8.6,prefill_us_per_token=50; several "
        "(names or figures), comma-separated, replay side by side",
    )
    sim.add_argument(
        "--events",
        type=int,
        default=None,
        metavar="N",
        help="replay only the scenario's first N events (any number of profiles)",
    )
    sim.add_argument(
        "--episodes", type=int, default=None, help="closed loop: episodes per strategy"
    )
    sim.add_argument("--model", default=None, help="as bench's (default: smollm2-135m)")
    sim.add_argument(
        "--engine",
        default="torch",
        choices=["torch", "llama-server"],
        help="the live tiers' engine: the in-process torch decoder, or (--clock real) a managed "
        "llama-server per strategy",
    )
    sim.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write the replay as an MCAP file (events, decisions, state, planner)",
    )
    sim.add_argument(
        "--map",
        type=Path,
        default=None,
        metavar="PATH",
        help="with a .mcap recording as the scenario: which channel and fields make events",
    )
    sim.add_argument(
        "--spec",
        type=Path,
        default=None,
        metavar="PATH",
        help="with a .mcap recording as the scenario: the agent spec (and grading rules)",
    )
    sim.add_argument(
        "--planner",
        default=None,
        metavar="URL",
        help="also replay tree/hybrid with the planner on this inference server (--clock real)",
    )
    sim.add_argument("--device", default="auto")
    sim.add_argument("--dtype", default="auto")
    sim.add_argument("--json", type=Path, default=None, metavar="PATH")
    sim.add_argument("--decisions", type=Path, default=None, metavar="PATH")
    sim.add_argument("--report", type=Path, default=None, metavar="DIR")
    sim.add_argument(
        "--mqtt",
        default=None,
        metavar="URL",
        help="with --clock real: send the events to a running agent over MQTT",
    )
    sim.add_argument("--agent-id", default="agent", help="the running agent's id (--mqtt)")
    sim.add_argument(
        "--fleet",
        default=None,
        metavar="N[,N...]",
        help="replay fleets of N robots (N seeds of the trace) sharing one planner, e.g. 1,4,16",
    )
    sim.add_argument(
        "--fleet-states",
        choices=["shared", "disjoint"],
        default="shared",
        help="with --fleet: robots in the scenario's states (shared) or each at a site of "
        "its own, so no two robots' states overlap (disjoint)",
    )
    return parser


def _add_run(sub: Any) -> None:
    """``forethought run``'s flags."""
    run = sub.add_parser("run", help="run an agent on an MQTT broker until SIGINT/SIGTERM")
    run.add_argument("spec", type=Path, help="agent spec (YAML or JSON; a scenario works too)")
    run.add_argument("--mqtt", default=None, metavar="URL", help="mqtt://host:port or mqtts://")
    run.add_argument(
        "--zenoh",
        action="append",
        default=None,
        metavar="ENDPOINT",
        help="a Zenoh endpoint to connect to, tcp/host:port (repeatable)",
    )
    run.add_argument(
        "--zenoh-listen",
        action="append",
        default=None,
        metavar="ENDPOINT",
        help="a Zenoh endpoint to listen on (repeatable)",
    )
    run.add_argument(
        "--ros2",
        type=Path,
        default=None,
        metavar="MAP",
        help="join a ROS 2 graph over rmw_zenoh: the map's topics are events, actions go to "
        "its action topic (router tcp/localhost:7447 unless --zenoh/--zenoh-listen)",
    )
    run.add_argument("--agent-id", default=None, help="names the topics (default: agent)")
    run.add_argument("--config", type=Path, default=None, help="TOML configuration file")
    run.add_argument("--model", default=None, help="both roles' model: alias, dir, .gguf or URL")
    run.add_argument("--planner-model", default=None, help="the planner's own model (or URL)")
    run.add_argument("--live-model", default=None, help="the live tiers' own model (or URL)")
    run.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="PATH",
        help="record events, decisions, state and planner figures to this MCAP file",
    )
    run.add_argument(
        "--health-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve /health (JSON) over HTTP on this port of 127.0.0.1 (0: any free port)",
    )
    run.add_argument(
        "--metrics",
        action="store_true",
        help="also serve /metrics in the Prometheus text format (needs prometheus-client)",
    )
    _tls_flags(run)
    _fleet_flags(run)


def _fleet_flags(p: argparse.ArgumentParser) -> None:
    """Fleet flags; the password comes only from FORETHOUGHT_FLEET__PASSWORD or a file."""
    p.add_argument(
        "--fleet",
        default=None,
        metavar="URL",
        help="share a policy tree over NATS JetStream: nats://host:port (comma-separated)",
    )
    p.add_argument("--fleet-name", default=None, help="the fleet (its bucket: ft-NAME-tree)")
    p.add_argument("--fleet-ca", type=Path, default=None, help="CA file of the servers' certs")
    p.add_argument(
        "--fleet-user",
        default=None,
        help="NATS user; the password: FORETHOUGHT_FLEET__PASSWORD or fleet.password_file",
    )


def _fleet(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--fleet*`` flags as fleet config fields."""
    return {
        "url": args.fleet,
        "name": args.fleet_name,
        "ca_file": args.fleet_ca,
        "user": args.fleet_user,
    }


def _add_plan(sub: Any) -> None:
    """``forethought plan``'s flags."""
    plan = sub.add_parser("plan", help="plan for a fleet's shared tree (a planner worker)")
    plan.add_argument("spec", type=Path, help="the fleet's agent spec (YAML or JSON)")
    plan.add_argument("--model", default=None, help="alias, dir, .gguf or inference-server URL")
    plan.add_argument("--config", type=Path, default=None, help="TOML configuration file")
    plan.add_argument("--worker-id", default="worker", help="this worker's name in claims")
    plan.add_argument(
        "--replicas", type=int, default=None, help="copies of the tree the cluster keeps (1-5)"
    )
    _fleet_flags(plan)


def _add_check(sub: Any) -> None:
    """``forethought check``'s and ``forethought schema``'s flags."""
    check = sub.add_parser(
        "check", help="check a spec or scenario: every problem, with no model loaded (< 2 s)"
    )
    check.add_argument("spec", type=Path, help="agent spec or scenario (YAML or JSON)")
    check.add_argument(
        "--trace",
        action="store_true",
        help="check it as a simulator scenario (a trace or generate block is required); "
        "implied when the file has one",
    )
    check.add_argument(
        "--profile",
        default=None,
        help="the device the planning cost is given under: a shipped profile's name or figures "
        "(step_ms=8.6,prefill_us_per_token=50); default: the file's profile, else "
        "cpu-2core-smollm2",
    )
    tree = sub.add_parser(
        "tree", help="what a policy tree holds (keys, actions, model, age), or would hold"
    )
    tree.add_argument("file", type=Path, help="a tree snapshot, or a spec/scenario file")
    tree.add_argument(
        "--state", default=None, metavar="JSON", help="with a spec: patch its initial state"
    )
    tree.add_argument(
        "--snapshot", type=Path, default=None, help="with a spec: the snapshot to read answers from"
    )
    schema = sub.add_parser("schema", help="print the JSON Schema of a file format")
    schema.add_argument("format", choices=["spec"], help="spec: spec and scenario files")


def _add_send(sub: Any) -> None:
    """``forethought send``'s flags."""
    send = sub.add_parser("send", help="publish a test event and print the decision")
    send.add_argument("type", help="event type")
    send.add_argument("--params", default="{}", help="event parameters as a JSON object")
    send.add_argument("--mqtt", default=None, metavar="URL", help="mqtt://host:port or mqtts://")
    send.add_argument(
        "--zenoh",
        action="append",
        default=None,
        metavar="ENDPOINT",
        help="ask over Zenoh (the agent's decide queryable): tcp/host:port",
    )
    send.add_argument("--config", type=Path, default=None, help="TOML configuration file")
    _tls_flags(send)
    send.add_argument("--agent-id", default="agent")
    send.add_argument("--deadline-ms", type=float, default=None)
    send.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the answer")


def _tls_flags(p: argparse.ArgumentParser) -> None:
    """Broker and Zenoh TLS and user flags; passwords come only from the environment or a file."""
    p.add_argument("--mqtt-ca", type=Path, default=None, help="CA file of the broker's cert")
    p.add_argument("--mqtt-cert", type=Path, default=None, help="client certificate (mTLS)")
    p.add_argument("--mqtt-key", type=Path, default=None, help="client key (mTLS)")
    p.add_argument(
        "--mqtt-user",
        default=None,
        help="username; the password: FORETHOUGHT_MQTT__PASSWORD or mqtt.password_file",
    )

    p.add_argument("--zenoh-ca", type=Path, default=None, help="CA file of the peers' certs")
    p.add_argument(
        "--zenoh-cert", type=Path, default=None, help="this side's certificate (tls/ listen, mTLS)"
    )
    p.add_argument("--zenoh-key", type=Path, default=None, help="this side's key")
    p.add_argument(
        "--zenoh-user",
        default=None,
        help="Zenoh username; the password: FORETHOUGHT_ZENOH__PASSWORD or zenoh.password_file",
    )


def _tls(args: argparse.Namespace, prefix: str = "mqtt") -> dict[str, Any]:
    """The ``--mqtt-*`` (or ``--zenoh-*``) TLS and user flags as config fields."""
    return {
        "ca_file": getattr(args, f"{prefix}_ca"),
        "cert_file": getattr(args, f"{prefix}_cert"),
        "key_file": getattr(args, f"{prefix}_key"),
        "username": getattr(args, f"{prefix}_user"),
    }


def _send(args: argparse.Namespace) -> dict[str, Any]:
    """``forethought send``: one event to a running agent, over MQTT or Zenoh; its decision."""
    from forethought.commands._run import settings_with  # noqa: PLC0415
    from forethought.commands._send import send_event  # noqa: PLC0415
    from forethought.runtime import AgentConfig  # noqa: PLC0415

    try:
        params = orjson.loads(args.params)
    except orjson.JSONDecodeError as exc:
        raise ConfigError("--params", args.params, f"not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise ConfigError("--params", args.params, "must be a JSON object")
    if not args.zenoh and args.mqtt is None:
        raise ConfigError("--mqtt", None, "give --mqtt mqtt://host:port or --zenoh")
    cfg = AgentConfig.load(args.config)
    common: dict[str, Any] = {
        "agent_id": args.agent_id,
        "event_type": args.type,
        "params": params,
        "deadline_ms": args.deadline_ms,
        "wait_s": args.wait,
    }
    if args.zenoh:
        from forethought.commands._send import send_event_zenoh  # noqa: PLC0415

        security = settings_with(cfg.zenoh, _tls(args, "zenoh")).security()
        reply = asyncio.run(send_event_zenoh(connect=args.zenoh, security=security, **common))
    else:
        mqtt_security = settings_with(cfg.mqtt, _tls(args)).security()
        reply = asyncio.run(send_event(mqtt=args.mqtt, security=mqtt_security, **common))
    return reply


def _sim(args: argparse.Namespace) -> None:
    """``forethought sim``: the matrix, several profiles side by side, or one replay."""
    if args.matrix:
        from forethought.commands._sim import run_matrix  # noqa: PLC0415 - loads torch

        run_matrix(
            scenarios=[args.scenario] if args.scenario else None,
            profiles=_profiles(args.profile) if args.profile else None,
            model=args.model,
            device=args.device,
            dtype=args.dtype,
            json_path=args.json,
            strategy=args.strategy,
        )
    elif args.fleet is not None:
        from forethought.commands._sim_fleet import fleet_sizes, run_fleet_sim  # noqa: PLC0415

        if args.scenario is None:
            raise ConfigError("scenario", None, "give a scenario file with --fleet")
        run_fleet_sim(
            scenario_path=args.scenario,
            sizes=fleet_sizes(args.fleet),
            states=args.fleet_states,
            profile=args.profile,
            model=args.model,
            device=args.device,
            dtype=args.dtype,
            json_path=args.json,
        )
    elif args.profile is not None and len(_profiles(args.profile)) > 1:
        from forethought.commands._sim import strategy_names  # noqa: PLC0415
        from forethought.commands._sim_side_by_side import run_profiles  # noqa: PLC0415 - loads torch

        if args.scenario is None:
            raise ConfigError("scenario", None, "give a scenario file")
        run_profiles(
            scenario_path=args.scenario,
            profiles=_profiles(args.profile),
            events=args.events,
            strategy=strategy_names(args.strategy),
            seed=args.seed,
            model=args.model,
            device=args.device,
            dtype=args.dtype,
            json_path=args.json,
            report=args.report,
        )
    else:
        from forethought.commands._sim import run_sim  # noqa: PLC0415 - loads torch

        if args.scenario is None:
            raise ConfigError("scenario", None, "give a scenario file (or --matrix)")
        run_sim(
            seed=args.seed,
            scenario_path=args.scenario,
            strategy=args.strategy,
            clock=args.clock,
            speed=args.speed,
            profile=args.profile,
            model=args.model,
            device=args.device,
            dtype=args.dtype,
            json_path=args.json,
            decisions=args.decisions,
            report=args.report,
            mqtt=args.mqtt,
            agent_id=args.agent_id,
            planner=args.planner,
            record=args.record,
            mapping=args.map,
            spec=args.spec,
            engine=args.engine,
            events=args.events,
            episodes=args.episodes,
        )


def _profiles(text: str) -> list[str]:
    """``--profile``'s profiles, each checked before anything loads (names or figures)."""
    from forethought.sims.internals import validate_profiles  # noqa: PLC0415

    return validate_profiles(text)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status. A closed pipe ends it quietly."""
    try:
        return _main(argv)
    except BrokenPipeError:
        return _closed_pipe()


def _main(argv: Sequence[str] | None = None) -> int:
    """Run one command (one branch per command, nothing shared)."""
    args = _parser().parse_args(argv)
    if args.command in ("bench", "sim") and args.model is None:
        # Read here, not at import: the planner package is heavy and `check` must start fast.
        from forethought.models import DEFAULT_MODEL  # noqa: PLC0415

        args.model = DEFAULT_MODEL
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "bench" and args.suite == "engine":
            from forethought.bench import run_engine_bench  # noqa: PLC0415 - loads torch

            run_engine_bench(model=args.model, rounds=args.rounds, json_path=args.json)
        elif args.command == "bench":
            from forethought.bench import run_bench  # noqa: PLC0415 - loads torch

            run_bench(
                model=args.model,
                device=args.device,
                dtype=args.dtype,
                grammar=args.grammar,
                quick=args.quick,
                json_path=args.json,
                suite=args.suite,
                backend_url=args.backend,
            )
        elif args.command == "sim":
            _sim(args)
        elif args.command == "run":
            from forethought.commands._run import run_agent  # noqa: PLC0415

            return asyncio.run(
                run_agent(
                    args.spec,
                    mqtt=args.mqtt,
                    agent_id=args.agent_id,
                    config=args.config,
                    tls=_tls(args),
                    zenoh_tls=_tls(args, "zenoh"),
                    models={
                        "model": args.model,
                        "planner_model": args.planner_model,
                        "live_model": args.live_model,
                    },
                    zenoh=args.zenoh,
                    zenoh_listen=args.zenoh_listen,
                    record=args.record,
                    health_port=args.health_port,
                    metrics=args.metrics,
                    fleet=_fleet(args),
                    ros2=args.ros2,
                )
            )
        elif args.command == "plan":
            from forethought.commands._plan import run_worker  # noqa: PLC0415

            return asyncio.run(
                run_worker(
                    args.spec,
                    fleet={**_fleet(args), "replicas": args.replicas},
                    model=args.model,
                    config=args.config,
                    worker_id=args.worker_id,
                )
            )
        elif args.command == "send":
            print(orjson.dumps(_send(args)).decode())
        elif args.command == "check":
            from forethought.commands._check import run_check  # noqa: PLC0415 - no model, no torch

            return run_check(
                args.spec,
                scenario=True if args.trace else None,
                profile=args.profile,
                out=sys.stdout,
            )
        elif args.command == "tree":
            from forethought.commands._tree import run_tree  # noqa: PLC0415 - no model

            return run_tree(args.file, state=args.state, snapshot=args.snapshot, out=sys.stdout)
        elif args.command == "schema":
            from forethought.sims.internals import spec_file_schema  # noqa: PLC0415

            print(orjson.dumps(spec_file_schema(), option=orjson.OPT_INDENT_2).decode())
    except ForethoughtError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def _closed_pipe() -> int:
    """The reader went away (``forethought tree | head``): stop quietly, as ``yes | head`` does.

    Standard output is pointed at /dev/null so the interpreter's last flush cannot raise again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by a closed pipe


if __name__ == "__main__":
    sys.exit(main())
