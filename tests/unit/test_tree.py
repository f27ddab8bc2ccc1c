import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from forethought.policies import ConfigError, EventKey, PolicyNode, PolicyTree, SnapshotError
from forethought.policies._spec import load_document


def node(
    fp: str, i: int, p: float = 0.5, created: float = 0.0, nxt: str | None = None
) -> PolicyNode:
    return PolicyNode(
        fingerprint=fp,
        key=EventKey("e", (("i", i),)),
        action={"a": f"x{i}"},
        compact=f'{{"a":"x{i}"}}',
        probability=p,
        model_id="m",
        tokens=5,
        gen_seconds=0.1,
        created_at=created,
        next_fingerprint=nxt,
    )


def test_insert_and_lookup() -> None:
    tree = PolicyTree()
    stored = tree.insert(node("s1", 1))
    assert stored.version == 1
    assert tree.lookup("s1", EventKey("e", (("i", 1),))) == stored
    assert tree.lookup("s2", EventKey("e", (("i", 1),))) is None
    assert ("s1", EventKey("e", (("i", 1),))) in tree
    assert len(tree) == 1
    replaced = tree.insert(node("s1", 1, p=0.9))
    assert len(tree) == 1
    assert tree.lookup("s1", replaced.key).probability == 0.9  # type: ignore[union-attr]
    assert tree.version == 2


def test_graph_links_states_through_effects() -> None:
    tree = PolicyTree()
    tree.insert(node("s1", 1, nxt="s2"))
    tree.insert(node("s2", 2))
    g = tree.graph
    assert g.has_edge(("s", "s1"), ("b", "s1", EventKey("e", (("i", 1),))))
    assert g.has_edge(("b", "s1", EventKey("e", (("i", 1),))), ("s", "s2"))
    assert [n.key for n in tree.branches("s2")] == [EventKey("e", (("i", 2),))]
    tree.remove("s1", EventKey("e", (("i", 1),)))
    assert ("s", "s1") not in g
    assert ("s", "s2") in g


def test_eviction_keeps_the_cap_and_drops_the_least_valuable_first() -> None:
    evicted: list[PolicyNode] = []
    tree = PolicyTree(max_nodes=5, on_evict=evicted.append)
    for i in range(5):
        tree.insert(node("s", i, p=0.1 * (i + 1), created=float(i)))
    tree.insert(node("s", 99, p=0.05, created=10.0))  # the least probable goes at once
    assert [n.key.param("i") for n in evicted] == [99]
    tree.insert(node("s", 7, p=0.9, created=11.0))
    assert [n.key.param("i") for n in evicted] == [99, 0]
    # equal probability: the older one goes
    tree.insert(node("t", 1, p=0.2, created=2.0))
    assert evicted[-1].key.param("i") == 1
    assert evicted[-1].fingerprint == "s"
    assert len(tree) == 5
    assert tree.evictions == 3
    for i in range(200):
        tree.insert(node("u", i, p=(i * 7919 % 100) / 100, created=float(i)))
        assert len(tree) <= 5
    assert len(tree.graph) <= 5 * 2 + 2  # roots and branches only for what is kept


def test_snapshot_round_trip(tmp_path: Path) -> None:
    tree = PolicyTree()
    for i in range(50):
        tree.insert(node(f"s{i % 3}", i, p=i / 50, nxt="s9" if i % 5 == 0 else None))
    path = tmp_path / "tree.json"
    tree.save(path, schema="abc", model_id="m")
    back = PolicyTree.load(path, schema="abc", model_id="m")
    assert len(back) == 50
    assert {(n.fingerprint, n.key, n.compact) for n in back.nodes()} == {
        (n.fingerprint, n.key, n.compact) for n in tree.nodes()
    }
    assert back.version >= tree.version
    assert back.graph.has_edge(("b", "s0", EventKey("e", (("i", 0),))), ("s", "s9"))


def test_snapshot_for_another_schema_or_model_is_refused(tmp_path: Path) -> None:
    tree = PolicyTree()
    tree.insert(node("s", 1))
    path = tmp_path / "t.json"
    tree.save(path, schema="abc", model_id="m")
    with pytest.raises(SnapshotError) as info:
        PolicyTree.load(path, schema="xyz", model_id="m")
    assert info.value.reason == "mismatch"
    assert "abc" in str(info.value)
    with pytest.raises(SnapshotError, match="model 'm'"):
        PolicyTree.load(path, schema="abc", model_id="other")


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b'{"format": "other"}',
        b"[]",
        b'{"format": "forethought.policy-tree/1", "schema": "abc",'
        b' "model": "m", "nodes": [[1, 2]]}',
    ],
)
def test_corrupt_snapshot_is_reported(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(SnapshotError) as info:
        PolicyTree.load(path, schema="abc", model_id="m")
    assert info.value.reason == "corrupt"


def test_a_process_killed_mid_save_leaves_old_or_new(tmp_path: Path) -> None:
    path = tmp_path / "tree.json"
    script = textwrap.dedent(f"""
        from forethought.policies._events import EventKey
        from forethought.policies._tree import PolicyNode, PolicyTree
        tree = PolicyTree(max_nodes=100_000)
        for i in range(20_000):
            tree.insert(PolicyNode("s", EventKey("e", (("i", i),)), {{"a": "x" * 40}}, "c",
                                   0.5, "m", 5, 0.1, 0.0))
        gen = 0
        while True:
            gen += 1
            tree.insert(PolicyNode("gen", EventKey("g", ()), {{"n": gen}}, "c", 1.0, "m", 1,
                                   0.0, 0.0))
            tree.save({str(path)!r}, schema="abc", model_id="m")
            print(gen, flush=True)
    """)
    for saves in (1, 3, 5):
        with subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
        ) as proc:
            assert proc.stdout is not None
            # ``saves`` full saves are done, and the next one is being written: kill it there.
            for _ in range(saves):
                assert proc.stdout.readline().strip().isdigit()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        tree = PolicyTree.load(path, schema="abc", model_id="m", max_nodes=100_000)
        assert len(tree) == 20_001
        assert tree.lookup("gen", EventKey("g", ())) is not None


def test_snapshot_is_owner_only_and_checked_against_its_checksum(tmp_path: Path) -> None:
    tree = PolicyTree()
    tree.insert(
        PolicyNode("s", EventKey("e", (("x", 1.5),)), {"a": "go"}, "{}", 0.5, "m", 3, 0.1, 1.0)
    )
    path = tmp_path / "tree.json"
    tree.save(path, schema="s1", model_id="m")
    assert path.stat().st_mode & 0o777 == 0o600
    back = PolicyTree.load(path, schema="s1", model_id="m")
    assert [n.to_row() for n in back.nodes()] == [n.to_row() for n in tree.nodes()]
    data = orjson.loads(path.read_bytes())
    data["nodes"][0][2] = {"a": "jump"}  # an action changed behind our back
    path.write_bytes(orjson.dumps(data))
    with pytest.raises(SnapshotError, match="checksum"):
        PolicyTree.load(path, schema="s1", model_id="m")


def test_spec_files_have_a_size_limit_checked_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("name: x\n" + "#" * 2048)
    with pytest.raises(ConfigError, match="larger than 1024 bytes"):
        load_document(big, max_bytes=1024)
