"""Reference waste: the expected waste of a planner that knows the stream, worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from extras import needs

from forethought.models import ScriptedBackend
from forethought.policies import EventKey
from forethought.sims import load_scenario, metrics, replay, table, write_json, write_report
from forethought.sims._waste import event_distribution, reference_waste, state_visits

SPEC: dict[str, Any] = {
    "name": "tiny",
    "description": "A test robot.",
    "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]},
    "default_action": {"a": "stop"},
    "state": {"zone": "a"},
    "events": [
        {"type": "ping", "deadline_ms": 150, "weight": 3},
        {"type": "turn", "deadline_ms": 150, "weight": 1, "params": {"side": ["left", "right"]}},
    ],
}
PING = EventKey("ping", ())
LEFT = EventKey("turn", (("side", "left"),))
RIGHT = EventKey("turn", (("side", "right"),))


def scenario(tmp_path: Path, **rest: Any) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**SPEC, **rest}))
    return path


def test_the_reference_waste_of_a_generated_stream_by_hand(tmp_path: Path) -> None:
    # Ten generated events, types 3:1, side left/right evenly: p(ping) = 3/4, p(turn, left) =
    # p(turn, right) = 1/8. The zone drifts a -> b after five events, so each type is seen in
    # two states, five events each.
    sc = load_scenario(
        scenario(
            tmp_path,
            generate={
                "seed": 1,
                "count": 10,
                "mean_gap_ms": 100,
                "drift": [{"field": "zone", "every": 5, "values": ["a", "b"]}],
            },
        )
    )
    p = event_distribution(sc)
    assert p == pytest.approx({PING: 0.75, LEFT: 0.125, RIGHT: 0.125})
    visits = state_visits(sc)
    assert sorted(visits.values()) == [5, 5, 5, 5]  # (ping, a) (ping, b) (turn, a) (turn, b)

    # Coverage 75 %: ping alone holds it. Two branches (one per state), each unused only if
    # none of its state's five events is a ping: 1/4^5. Waste = 1/4^5 = 0.0009765625.
    at75 = reference_waste(p, visits, 0.75)
    assert (at75.planned, at75.mass) == (2, pytest.approx(0.75))
    assert at75.waste == pytest.approx(0.25**5)

    # Coverage 80 %: ping and one side (mass 7/8). Four branches; a side's branch is used with
    # chance 1 - (7/8)^5 = 0.487091064453125. Used = 2 x 0.9990234375 + 2 x 0.487091...
    # = 2.97222900390625; waste = 1 - 2.97222900390625 / 4 = 0.2569427490234375.
    at80 = reference_waste(p, visits, 0.8)
    assert (at80.planned, at80.mass) == (4, pytest.approx(0.875))
    assert at80.waste == pytest.approx(0.2569427490234375)

    # Coverage 100 %: every key in both states, six branches: used 3.9464111328125.
    at100 = reference_waste(p, visits, 1.0)
    assert at100.planned == 6
    assert at100.waste == pytest.approx(1 - 3.9464111328125 / 6)

    # Nothing answered: nothing planned, nothing wasted.
    assert reference_waste(p, visits, 0.0).planned == 0


def test_the_reference_of_a_written_trace_is_its_empirical_distribution(tmp_path: Path) -> None:
    # Three pings and a left turn, one state (four events): p(ping) 3/4, p(left) 1/4, p(right)
    # 0 (never planned). At 80 %: ping and left, used (1 - 1/4^4) + (1 - (3/4)^4)
    # = 0.99609375 + 0.68359375 = 1.6796875 of 2; waste 0.16015625.
    trace = [{"at_ms": 100 * i, "type": "ping"} for i in range(3)]
    trace.append({"at_ms": 400, "type": "turn", "params": {"side": "left"}})
    sc = load_scenario(scenario(tmp_path, trace=trace))
    p = event_distribution(sc)
    assert p == pytest.approx({PING: 0.75, LEFT: 0.25})
    ref = reference_waste(p, state_visits(sc), 0.8)
    assert ref.planned == 2
    assert ref.waste == pytest.approx(0.16015625)


def test_a_type_that_follows_another_weighs_in_at_its_long_run_share(tmp_path: Path) -> None:
    # After a ping always a turn; otherwise types 1:1. Stationary: pi_ping = pi_turn / 2, so
    # ping 1/3 and turn 2/3 (each side 1/3).
    sc = load_scenario(
        scenario(
            tmp_path,
            events=[{**SPEC["events"][0], "weight": 1}, SPEC["events"][1]],
            generate={
                "seed": 1,
                "count": 10,
                "mean_gap_ms": 100,
                "follow": {"ping": {"turn": 1.0}},
            },
        )
    )
    assert event_distribution(sc) == pytest.approx({PING: 1 / 3, LEFT: 1 / 3, RIGHT: 1 / 3})


def test_every_replay_reports_the_reference_beside_its_waste(tmp_path: Path) -> None:
    needs("matplotlib", "report")  # the report's figure
    # Plumbing (a scripted model is enough here): the planner figures carry the reference at
    # the tree's own coverage, and the table and the JSON show it.
    trace = [{"at_ms": 2000 + 500 * i, "type": "ping"} for i in range(6)]
    trace += [{"at_ms": 5200, "type": "turn", "params": {"side": "left"}}]
    sc = load_scenario(scenario(tmp_path, trace=trace))
    runs = replay(
        sc,
        lambda: ScriptedBackend(prefill_s=0.05, step_s=0.001, action={"a": "go"}),
        strategies=("tree",),
    )
    planner = metrics(runs["tree"])["planner"]
    tree_hits = sum(r.tier == "tree" for r in runs["tree"].records)
    assert tree_hits > 0  # planned in the two seconds before the first event
    assert planner["tree_coverage"] == pytest.approx(tree_hits / 7)
    assert planner["coverage_per_branch"] == pytest.approx(tree_hits / planner["generated"])
    expected = reference_waste(event_distribution(sc), state_visits(sc), tree_hits / 7)
    assert planner["reference_waste"] == pytest.approx(expected.waste)
    assert planner["reference_planned"] == expected.planned
    text = table(sc, runs)
    assert "reference waste" in text
    assert "coverage per branch" in text
    write_json(tmp_path / "r.json", sc, runs, model="scripted", clock="virtual", profile={})
    data = orjson.loads((tmp_path / "r.json").read_bytes())
    assert data["strategies"]["tree"]["planner"]["reference_waste"] == pytest.approx(expected.waste)
    page = write_report(tmp_path / "report", sc, runs).read_text(encoding="utf-8")
    assert "reference waste" in page
