"""The simulator: loading, virtual-clock arithmetic, queueing, determinism, reports, e2e."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from forethought.commands._sim import run_matrix
from forethought.models import LatencyProfile, ScriptedBackend, TransformersBackend
from forethought.policies import AgentSpec, ConfigError
from forethought.sims import (
    PROFILES,
    load_scenario,
    metrics,
    replay,
    write_decisions,
    write_json,
    write_report,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "sims" / "scenarios"
BASE: dict[str, Any] = {
    "name": "t",
    "description": "A test robot.",
    "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]},
    "default_action": {"a": "stop"},
    "events": [
        {"type": "ping", "deadline_ms": 150, "params": {"d": {"min": 0, "max": 2, "step": 0.5}}}
    ],
    "trace": [{"at_ms": 0, "type": "ping", "params": {"d": 1}}],
}


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("shipped", sorted(p.name for p in SCENARIOS.glob("*.yaml")))
def test_shipped_scenarios_load(shipped: str) -> None:
    scenario = load_scenario(SCENARIOS / shipped)
    assert scenario.events()
    assert scenario.spec.event_space()


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"description": None}, "description"),
        (
            {
                "events": [
                    {
                        "type": "ping",
                        "deadline_ms": 1,
                        "params": {"d": {"min": 0, "max": 1, "step": 0.3}},
                    }
                ]
            },
            "events[0].params",
        ),
        ({"default_action": {"a": "fly"}}, "default_action"),
        ({"events": [{"type": "ping", "deadline_ms": 1, "effects": {"x": "$nope"}}]}, "$nope"),
        ({"trace": [{"at_ms": -1, "type": "ping"}]}, "trace[0].at_ms"),
        ({"trace": []}, "give a trace"),
        ({"trace": [{"at_ms": 1, "type": "ping", "accept": [{"a": "fly"}]}]}, "trace[0].accept[0]"),
    ],
)
def test_loader_errors_name_file_field_and_problem(
    tmp_path: Path, change: dict[str, Any], needle: str
) -> None:
    data = {**BASE, **change}
    data = {k: v for k, v in data.items() if v is not None}
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert str(path) in str(info.value)
    assert needle in str(info.value)


def test_generated_events_are_seeded_and_off_grid(tmp_path: Path) -> None:
    data = {**BASE, "generate": {"seed": 3, "count": 50, "mean_gap_ms": 100}}
    a = load_scenario(write(tmp_path, data)).events()
    b = load_scenario(write(tmp_path, data)).events()
    assert a == b
    assert len(a) == 51
    assert any(e.params["d"] not in (0, 0.5, 1.0, 1.5, 2.0) for e in a[1:])


def test_live_strategy_queues_with_exact_deadline_arithmetic(tmp_path: Path) -> None:
    data = {
        **BASE,
        "trace": [
            {"at_ms": 0, "type": "ping", "params": {"d": 1}},  # 0 -> 100: met
            {"at_ms": 50, "type": "ping", "params": {"d": 1}},  # waits: 100 -> 200, 150 = limit
            {"at_ms": 300, "type": "ping", "params": {"d": 1}},  # 300 -> 400: met
            {"at_ms": 310, "type": "ping", "params": {"d": 1}, "deadline_ms": 189.9},  # 400->500
        ],
    }
    scenario = load_scenario(write(tmp_path, data))
    runs = replay(
        scenario,
        lambda: ScriptedBackend(live_s=0.1, action={"a": "go"}),
        strategies=("live-naive",),
    )
    recs = runs["live-naive"].records
    assert [r.latency_ms for r in recs] == pytest.approx([100.0, 150.0, 100.0, 190.0])
    assert [r.met for r in recs] == [True, True, True, False]
    assert metrics(runs["live-naive"])["deadline_hit_rate"] == 0.75


def test_hybrid_strategy_in_virtual_time(tmp_path: Path) -> None:
    data = {
        **BASE,
        "trace": [
            {"at_ms": 5000, "type": "ping", "params": {"d": 1}},
            {"at_ms": 6000, "type": "alien", "params": {}},
        ],
    }
    scenario = load_scenario(write(tmp_path, data))
    runs = replay(
        scenario,
        lambda: ScriptedBackend(
            score_s=0.05, live_s=0.05, prefill_s=0.05, step_s=0.001, action={"a": "go"}
        ),
        strategies=("tree", "hybrid"),
    )
    tree, hybrid = runs["tree"].records, runs["hybrid"].records
    assert tree[0].tier == "tree"  # planned in the 5 s before it arrived
    assert tree[0].latency_ms == 0.0
    assert tree[1].tier == "default"
    assert tree[1].out_of_space
    assert hybrid[1].tier == "score"  # out of space: the model tiers answer
    assert hybrid[1].latency_ms == pytest.approx(50.0)
    assert runs["tree"].planner["branches"] >= 1


@pytest.mark.model
def test_virtual_replays_are_byte_identical(
    tiny_backend: TransformersBackend, tmp_path: Path
) -> None:
    data = {**BASE, "generate": {"seed": 1, "count": 12, "mean_gap_ms": 400}}
    scenario = load_scenario(write(tmp_path, data))
    profile = LatencyProfile.from_figures(step_ms=20, prefill_us_per_token=500)
    blobs = []
    for k in range(2):
        runs = replay(scenario, tiny_backend, profile=profile)
        path = tmp_path / f"d{k}.jsonl"
        write_decisions(path, runs)
        blobs.append(path.read_bytes())
    assert blobs[0] == blobs[1]
    lines = [orjson.loads(x) for x in blobs[0].splitlines()]
    assert len(lines) == 4 * 13
    assert set(lines[0]) >= {
        "strategy",
        "index",
        "type",
        "params",
        "at_ms",
        "deadline_ms",
        "latency_ms",
        "tier",
        "action",
        "met",
    }


def test_report_files_are_well_formed(tmp_path: Path) -> None:
    data = {
        **BASE,
        "trace": [
            {"at_ms": 1000, "type": "ping", "params": {"d": 1}, "accept": [{"a": "go"}]},
            {"at_ms": 2000, "type": "ping", "params": {"d": 2}},
        ],
    }
    scenario = load_scenario(write(tmp_path, data))
    runs = replay(scenario, lambda: ScriptedBackend(live_s=0.1, action={"a": "go"}))
    write_json(tmp_path / "r.json", scenario, runs, model="scripted", clock="virtual", profile={})
    report = orjson.loads((tmp_path / "r.json").read_bytes())
    assert report["scenario"] == "t"
    assert set(report["strategies"]) == {"live-naive", "live", "tree", "hybrid"}
    hybrid = report["strategies"]["hybrid"]
    for key in (
        "correct_in_time",
        "answered_in_time",
        "fallback_rate",
        "correct",
        "fidelity",
        "deadline_hit_rate",
        "graded",
        "latency_ms",
        "tiers",
        "tree_hit_rate",
    ):
        assert key in hybrid
    naive = report["strategies"]["live-naive"]
    assert naive["graded"] == 1
    assert naive["correct"] == 1.0
    assert naive["correct_in_time"] == 1.0
    index = write_report(tmp_path / "report", scenario, runs)
    page = index.read_text()
    assert page.count("<img") == 3
    for png in ("latency_cdf.png", "timeline.png", "hit_rate_by_type.png"):
        assert (tmp_path / "report" / png).read_bytes().startswith(b"\x89PNG")


@pytest.mark.smollm2
def test_shipped_scenario_end_to_end_on_the_embedded_model(
    smollm2_first_load: Any, tmp_path: Path
) -> None:
    backend = TransformersBackend(model="smollm2-135m", device="cpu")
    backend.load()
    scenario = load_scenario(SCENARIOS / "service-kiosk.yaml")
    runs = replay(scenario, backend, profile=backend.latency.profile())
    m = {k: metrics(v) for k, v in runs.items()}
    assert m["hybrid"]["events"] == len(scenario.events())
    assert m["hybrid"]["deadline_hit_rate"] >= m["live-naive"]["deadline_hit_rate"]
    assert m["hybrid"]["deadline_hit_rate"] >= 0.99
    assert m["hybrid"]["out_of_space"] == 1
    schema = scenario.spec.action_schema()
    for run in runs.values():
        for r in run.records:
            schema.validate(r.action)  # no invalid action, whatever the model wrote


def test_real_clock_replay_runs_on_the_wall_clock(tmp_path: Path) -> None:
    data = {
        **BASE,
        "trace": [
            {"at_ms": 0, "type": "ping", "params": {"d": 1}},
            {"at_ms": 400, "type": "ping", "params": {"d": 2}},
        ],
    }
    scenario = load_scenario(write(tmp_path, data))
    import time

    t0 = time.monotonic()
    runs = replay(
        scenario,
        lambda: ScriptedBackend(live_s=0.02, action={"a": "go"}),
        strategies=("live-naive",),
        clock="real",
        speed=4.0,
    )
    wall = time.monotonic() - t0
    assert 0.1 <= wall < 2.0  # 400 ms of scenario at 4x, plus two 20 ms calls
    recs = runs["live-naive"].records
    assert [r.met for r in recs] == [True, True]
    assert all(15.0 <= r.latency_ms < 150.0 for r in recs)


class _NoMemo(dict):  # type: ignore[type-arg]
    """A memo that keeps nothing: every naive call is computed."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


@pytest.mark.model
def test_replaying_a_repeated_naive_call_equals_computing_it(
    tiny_backend: TransformersBackend, tmp_path: Path
) -> None:
    trace = [{"at_ms": 300 * i, "type": "ping", "params": {"d": 1 + (i % 2)}} for i in range(6)]
    scenario = load_scenario(write(tmp_path, {**BASE, "trace": trace}))
    profile = LatencyProfile(0.01, 0.0005, 0.02, 0.001, spread95=1.3)  # random draws
    blobs = []
    for memo in (None, _NoMemo()):
        runs = replay(
            scenario, tiny_backend, strategies=("live-naive",), profile=profile, memo=memo
        )
        path = tmp_path / "naive.jsonl"
        write_decisions(path, runs)
        blobs.append(path.read_bytes())
        assert runs["live-naive"].model["passes"] > 0
    assert blobs[0] == blobs[1]


@pytest.mark.parametrize("shipped", sorted(p.name for p in SCENARIOS.glob("*.yaml")))
def test_the_spec_of_a_scenario_leaves_trace_and_grading_out(shipped: str) -> None:
    from forethought.sims import load_spec

    spec = load_spec(SCENARIOS / shipped)
    assert spec == load_scenario(SCENARIOS / shipped).spec
    with pytest.raises(ConfigError):  # the strict spec loader refuses the simulator's keys
        AgentSpec.from_file(SCENARIOS / shipped)


@pytest.mark.model
def test_the_matrix_runs_only_the_strategies_asked_for(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    kiosk = SCENARIOS / "service-kiosk.yaml"
    out = tmp_path / "matrix.json"

    def matrix(strategy: str) -> list[dict[str, Any]]:
        return run_matrix(
            scenarios=[kiosk],
            profiles=["design-note-gpu"],
            model=str(tiny_model_dir),
            device="cpu",
            dtype="float32",
            json_path=out,
            strategy=strategy,
        )

    rows = matrix("tree,hybrid")
    assert [(r["scenario"], r["profile"], r["strategy"]) for r in rows] == [
        ("service-kiosk", "design-note-gpu", "tree"),
        ("service-kiosk", "design-note-gpu", "hybrid"),
    ]
    assert all(r["events"] == len(load_scenario(kiosk).events()) for r in rows)
    assert orjson.loads(out.read_bytes())["rows"] == rows
    # planner waste stands beside the reference at the same coverage, and what a branch bought
    assert all(0 <= r["reference_waste"] <= 1 for r in rows)
    assert all(r["coverage_per_branch"] is not None for r in rows)
    with pytest.raises(ConfigError, match="--strategy"):
        matrix("tree,psychic")


@pytest.mark.model
def test_a_one_decision_action_is_answered_live_on_a_fast_device(
    tiny_backend: TransformersBackend, tmp_path: Path
) -> None:
    # BASE's action is one enum (the prefill decides it, no decode pass): on a fast device a
    # live call takes a prefill (~20 ms), well inside a 150 ms deadline. The live tier must
    # learn that from its own calls, not predict the default 8 decode steps for ever.
    data = {**BASE, "generate": {"seed": 1, "count": 4, "mean_gap_ms": 400}}
    scenario = load_scenario(write(tmp_path, data))
    runs = replay(scenario, tiny_backend, strategies=("live",), profile=PROFILES["gpu-8b"])
    tiers = [r.tier for r in runs["live"].records]
    assert len(tiers) == 5  # the trace's event and the 4 generated ones
    assert all(t == "live" for t in tiers), tiers
