"""MCAP: a robot's recording replayed as a trace, a replay recorded and read back, a writer
killed mid-run, and recordings the mapping cannot use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from forethought.models import LatencyProfile, TransformersBackend
from forethought.policies import ConfigError, InputError
from forethought.runtime import McapRecorder
from forethought.runtime._recorder import CHANNELS, read_mcap_json
from forethought.sims import (
    McapMapping,
    load_scenario,
    record_replay,
    replay,
    shipped_scenarios,
    trace_from_mcap,
    write_decisions,
)

pytest.importorskip("mcap")

RECORDED = next(p for p in shipped_scenarios() if p.stem == "recorded-amr")
RECORDINGS = RECORDED.parent.parent / "recordings"


def test_a_shipped_recording_is_a_scenario_trace() -> None:
    scenario = load_scenario(RECORDED)
    events = scenario.events()
    assert len(events) == 30  # every perception message, none of the odometry
    assert events[0].at_ms == 0
    assert events == sorted(events, key=lambda e: e.at_ms)
    assert {e.type for e in events} <= {"obstacle", "person", "clear"}
    assert set(events[0].params) == {"side", "distance_m"}
    assert events[0].state is not None
    assert "battery" in events[0].state
    # The same through the CLI's route: a spec file, a recording and a mapping.
    again = load_scenario(
        RECORDED,
        recording=(RECORDINGS / "amr-perception.mcap", RECORDINGS / "amr-perception.map.yaml"),
    )
    assert [e.model_dump() for e in again.events()] == [e.model_dump() for e in events]


@pytest.mark.model
def test_a_recorded_replay_reads_back_byte_for_byte(
    tiny_backend: TransformersBackend, tmp_path: Path
) -> None:
    scenario = load_scenario(RECORDED)
    profile = LatencyProfile.from_figures(step_ms=5.0, prefill_us_per_token=20.0)
    runs = replay(scenario, tiny_backend, strategies=("tree", "hybrid"), profile=profile)
    jsonl = tmp_path / "decisions.jsonl"
    write_decisions(jsonl, runs)
    path = tmp_path / "replay.mcap"
    written = record_replay(path, scenario, runs)
    messages = list(read_mcap_json(path))
    assert len(messages) == written
    assert {m.topic for m in messages} == set(CHANNELS)
    decisions = [m.data for m in messages if m.topic == "/forethought/decisions"]
    assert decisions == jsonl.read_bytes().splitlines()
    events = [m.json() for m in messages if m.topic == "/forethought/events"]
    assert len(events) == 30
    # Log times: each decision at or after its event, on the replay's own clock (which moves).
    event_at = {m.json()["id"]: m.log_ns for m in messages if m.topic == "/forethought/events"}
    logged = [
        (str(m.json()["index"]), m.log_ns) for m in messages if m.topic == "/forethought/decisions"
    ]
    assert logged
    assert all(at >= event_at[ident] for ident, at in logged), (logged, event_at)
    assert len({at for _, at in logged}) > 1  # not one stamp for all
    # The official reader (with the summary and index we wrote) agrees.
    from mcap.reader import make_reader

    with path.open("rb") as fh:
        official = [
            m.data
            for _, ch, m in make_reader(fh).iter_messages()
            if ch.topic == "/forethought/decisions"
        ]
    assert sorted(official) == sorted(decisions)


_KILLED_WRITER = """
import os, signal, sys
from forethought.runtime import McapRecorder
rec = McapRecorder(sys.argv[1], chunk_size=1024).open()
for i in range(2000):
    rec.write("/forethought/events", {"id": str(i), "type": "tick", "params": {}}, i * 1000)
    if i == 1500:
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writer_leaves_a_readable_file(tmp_path: Path) -> None:
    path = tmp_path / "killed.mcap"
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(path)], check=False)
    assert proc.returncode == -9
    got = [m.json() for m in read_mcap_json(path)]
    # Everything up to the last complete chunk (1 KiB chunks: a few dozen messages at most
    # are lost), in order, each whole.
    assert 1450 < len(got) <= 1501
    assert [int(e["id"]) for e in got] == list(range(len(got)))
    # The official seeking reader needs the summary a killed writer never wrote.
    from mcap.reader import make_reader

    with path.open("rb") as fh, pytest.raises(Exception):  # noqa: B017
        list(make_reader(fh).iter_messages())


def _recording(path: Path, encoding: str, messages: list[bytes]) -> None:
    from mcap.writer import Writer

    with path.open("wb") as fh:
        w = Writer(fh)
        w.start()
        schema = w.register_schema("x", "jsonschema" if encoding == "json" else "ros2msg", b"{}")
        ch = w.register_channel("/robot/events", encoding, schema)
        for i, m in enumerate(messages):
            w.add_message(ch, i * 1_000_000, m, i * 1_000_000)
        w.finish()


def test_recordings_the_mapping_cannot_use_are_clear_errors(tmp_path: Path) -> None:
    mapping = McapMapping(topic="/robot/events", type="kind", params={"side": "where.side"})
    cdr = tmp_path / "cdr.mcap"
    _recording(cdr, "cdr", [b"\x00\x01\x00\x00"])
    with pytest.raises(ConfigError, match=r"'cdr' cannot be decoded.*channel /robot/events"):
        trace_from_mcap(cdr, mapping)
    missing = tmp_path / "missing.mcap"
    _recording(missing, "json", [json.dumps({"kind": "person"}).encode()])
    with pytest.raises(InputError, match=r"/robot/events\[0\].*where.side"):
        trace_from_mcap(missing, mapping)
    other = McapMapping(topic="/nope", type="kind")
    with pytest.raises(ConfigError, match=r"no messages .*/robot/events"):
        trace_from_mcap(missing, other)
    garbage = tmp_path / "garbage.mcap"
    garbage.write_bytes(b"not an mcap file at all")
    with pytest.raises(InputError, match="not a readable MCAP file"):
        list(read_mcap_json(garbage))


def test_the_recorder_refuses_unknown_channels(tmp_path: Path) -> None:
    with McapRecorder(tmp_path / "r.mcap") as rec, pytest.raises(ConfigError, match="topic"):
        rec.write("/elsewhere", {"a": 1})
    assert orjson.loads(orjson.dumps(CHANNELS))  # the schemas are JSON
