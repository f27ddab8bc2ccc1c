"""The fleet's pieces without a server: keys, records, settings, permissions, ranking."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

pytest.importorskip("nats", reason="needs the fleet extra: pip install 'forethought[fleet]'")

from fleet_support import spec
from hypothesis import given
from hypothesis import strategies as st

from forethought.models import ScriptedBackend
from forethought.models._gate import ModelGate
from forethought.planner._branch import Branch
from forethought.planner._forecaster import Forecaster
from forethought.planner._planner import Planner
from forethought.policies import ConfigError, EventKey, PolicyNode, PolicyTree, WorldState
from forethought.runtime import AgentConfig, FleetConfig, fleet_permissions
from forethought.runtime.fleet._config import parse_fleet_urls
from forethought.runtime.fleet._record import BranchRecord, branch_key, decode_key

KV_KEY = r"^[-/_=.A-Za-z0-9]+$"

scalars = st.one_of(st.integers(-5, 5), st.floats(-2, 2, allow_nan=False), st.text(max_size=8))


@given(
    fp=st.text(min_size=1, max_size=20),
    kind=st.text(min_size=1, max_size=12),
    params=st.dictionaries(st.text(min_size=1, max_size=6), scalars, max_size=3),
)
def test_a_branch_key_is_kv_safe_and_reversible(fp: str, kind: str, params: dict) -> None:
    key = EventKey.from_json({"type": kind, "params": params})
    encoded = branch_key(fp, key)
    assert __import__("re").match(KV_KEY, encoded)
    assert not encoded.startswith(".")
    assert not encoded.endswith(".")
    assert decode_key(encoded) == (fp, key)


def node(fp: str = "a" * 16, action: str = "go") -> PolicyNode:
    return PolicyNode(fp, EventKey("clear"), {"a": action}, f'{{"a":"{action}"}}', 0.4, "m", 3,
                      0.01, 5.0)  # fmt: skip


def test_a_record_round_trips_and_garbage_is_refused() -> None:
    record = BranchRecord.of(node(), prompt="p" * 16, writer="w1")
    back = BranchRecord.decode(record.encode())
    assert back == record
    assert back.node.model_id == "m"
    for bad in (b"", b"{}", b"[1]", b'{"branch": [1], "prompt": "p"}'):
        with pytest.raises(ValueError, match="not a branch record"):
            BranchRecord.decode(bad)
    with pytest.raises(ValueError, match="not a branch key"):
        decode_key("nodot")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("mqtt://h:1", "nats://host:port"),
        ("nats://user:pw@h:4222", "credentials do not go in the URL"),
        (",", "nats://host:port"),
    ],
)
def test_a_bad_fleet_url_names_the_field_and_the_fix(url: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=r"fleet\.url") as err:
        parse_fleet_urls(url)
    assert problem in str(err.value)
    with pytest.raises(ValueError, match=r"fleet\.url"):
        FleetConfig(url=url)


def test_fleet_settings_come_from_the_agent_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_FLEET__URL", "nats://10.0.0.1:4222,nats://10.0.0.2:4222")
    monkeypatch.setenv("FORETHOUGHT_FLEET__PASSWORD", "s3cret")
    monkeypatch.setenv("FORETHOUGHT_FLEET__USER", "r7")
    cfg = AgentConfig.load(None).fleet
    assert cfg.connect_options()["servers"] == ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222"]
    assert cfg.connect_options()["password"] == "s3cret"
    assert "s3cret" not in repr(cfg)
    with pytest.raises(ConfigError, match=r"fleet\.name"):
        _ = FleetConfig(name="a b").names


def test_an_agent_may_not_write_the_tree_and_a_planner_may() -> None:
    agent = fleet_permissions("f1", "agent", robot="r1")
    assert "$KV.ft-f1-tree.>" in agent["publish"]["deny"]
    assert not any(s.startswith("$KV.") for s in agent["publish"]["allow"])
    assert "ft.f1.state.r1" in agent["publish"]["allow"]
    assert not any(".r2" in s for s in agent["publish"]["allow"])
    planner = fleet_permissions("f1", "planner")
    assert "$KV.>" in planner["publish"]["allow"]
    with pytest.raises(ConfigError, match=r"fleet\.robot"):
        fleet_permissions("f1", "agent")


class Link:
    """A fleet of robots in given states; claims everything (the ranking is what is tested)."""

    def __init__(self, states: list[WorldState]) -> None:
        self.states = states
        self.wrote: list[PolicyNode] = []

    def origins(self, own: WorldState) -> Sequence[tuple[WorldState, float]]:
        counts: dict[str, list] = {}
        for s in self.states:
            counts.setdefault(s.fingerprint, [s, 0.0])[1] += 1.0
        return [(s, n) for s, n in counts.values()] or [(own, 1.0)]

    def taken(self, fingerprint: str, key: EventKey) -> bool:
        return False

    async def claim(self, branches: Sequence[Branch]) -> list[Branch]:
        return list(branches)

    def written(self, node: PolicyNode) -> None:
        self.wrote.append(node)


def planner_for(link: Link) -> Planner:
    s = spec()
    return Planner(
        backend=ScriptedBackend(action={"a": "go"}),
        gate=ModelGate(),
        space=s.event_space(),
        schema=s.action_schema(),
        tree=PolicyTree(),
        forecaster=Forecaster(s.event_space()),
        description=s.description,
        state=s.initial_state(),
        live_tiers=False,
        fleet=link,
    )


async def test_a_state_counts_as_many_times_as_robots_are_in_it() -> None:
    s = spec()
    aisle = s.initial_state()
    dock = aisle.patched({"zone": "dock"})

    def values(states: list[WorldState]) -> dict[tuple[str, EventKey], float]:
        return {(b.fingerprint, b.key): b.value for b in planner_for(Link(states)).candidates()}

    crowded, lonely = values([aisle, dock, dock, dock]), values([aisle, aisle, aisle, dock])
    keys = list(s.event_space().keys())
    assert len(keys) == 5
    for key in keys:  # each of the dock's branches is worth more with three robots there
        ident = (dock.fingerprint_for(key.type), key)
        assert crowded[ident] > lonely[ident], key


async def test_the_planner_writes_only_claimed_branches_and_shares_them() -> None:
    s = spec()
    link = Link([s.initial_state()])
    planner = planner_for(link)
    async with planner._backend:  # type: ignore[attr-defined]
        first = planner._next_batch()  # one batch shares one state
        assert len(first) >= 2
        refused = {b.key for b in first[::2]}

        async def claim(branches: Sequence[Branch]) -> list[Branch]:
            return [b for b in branches if b.key not in refused]

        link.claim = claim  # type: ignore[method-assign]
        assert await planner._run_batch(first) is None  # one round, as the loop runs it
    assert link.wrote
    assert {n.key for n in link.wrote} == {b.key for b in first} - refused
    assert all(planner._tree.lookup(n.fingerprint, n.key) == n for n in link.wrote)


class _RefusingJetStream:
    """JetStream's create calls, refused with ``errors`` first, then accepted (recorded)."""

    def __init__(self, errors: Sequence[Exception]) -> None:
        self.errors = list(errors)
        self.created: list[str] = []

    async def create_key_value(self, *, bucket: str, **_: object) -> None:
        self._call(bucket)

    async def add_stream(self, *, name: str, **_: object) -> None:
        self._call(name)

    def _call(self, name: str) -> None:
        if self.errors:
            raise self.errors.pop(0)
        self.created.append(name)


async def test_the_fleet_waits_for_a_peer_offline_and_refuses_an_impossible_placement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import nats.js.errors

    from forethought.runtime.fleet._worker import ensure_fleet

    config = FleetConfig(url="nats://127.0.0.1:4222", name="t", replicas=3)
    names = config.names
    offline = nats.js.errors.BadRequestError(
        code=400, err_code=10005, description="no suitable peers for placement, peer offline"
    )
    electing = nats.js.errors.ServiceUnavailableError(
        code=503, err_code=10008, description="JetStream system temporarily unavailable"
    )
    js = _RefusingJetStream([offline, offline, electing])
    with caplog.at_level("WARNING", logger="forethought.fleet"):
        await ensure_fleet(js, config)  # type: ignore[arg-type]
    assert js.created == [names.tree, names.claims, names.demand]
    assert js.errors == []  # each refusal was waited out, and the calls went on
    said = [r.getMessage() for r in caplog.records if "cannot place" in r.getMessage()]
    assert len(said) == 1  # logged once,
    assert "peer offline" in said[0]  # with the server's reason

    # The same code for more replicas than nodes: no peer will come back, so it is final.
    impossible = nats.js.errors.BadRequestError(
        code=400, err_code=10005, description="no suitable peers for placement"
    )
    js = _RefusingJetStream([impossible])
    with pytest.raises(nats.js.errors.BadRequestError, match="no suitable peers"):
        await ensure_fleet(js, config)  # type: ignore[arg-type]
    assert js.created == []
    # No responders at all (JetStream not enabled): nats-py's bare 503, final too.
    js = _RefusingJetStream([nats.js.errors.ServiceUnavailableError()])
    with pytest.raises(nats.js.errors.ServiceUnavailableError):
        await ensure_fleet(js, config)  # type: ignore[arg-type]
    assert js.created == []
