"""The policy tree: precomputed actions by (state fingerprint, event key), on networkx.

The graph has a root per state fingerprint and a branch per anticipated event under it; a
branch whose event changes the state links on to that state's root, so the planner can expand
deeper (event A, then B in the state A leaves). Branches are shared by (fingerprint, key):
coming back to a state finds its work still there. An index makes a lookup one dict access.

Size is bounded: past ``max_nodes`` the least valuable branch goes first (lowest planning-time
probability, then oldest). Snapshots are written atomically (temp file, fsync, rename), carry the
action-schema fingerprint and model id, and are refused for another schema or model.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ._errors import ConfigError, SnapshotError
from ._events import EventKey

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["PolicyNode", "PolicyTree"]

_FORMAT = "forethought.policy-tree/2"
"""Version 2 adds a SHA-256 checksum of the nodes; version 1 files are refused."""


@dataclass(frozen=True, slots=True)
class PolicyNode:
    """One precomputed decision: the action for ``key`` in the state ``fingerprint``."""

    fingerprint: str
    key: EventKey
    action: dict[str, Any]
    """The readable action, validated when it was planned."""
    compact: str
    """The compact JSON the model wrote."""
    probability: float
    """p(key) in that state when it was planned."""
    model_id: str
    tokens: int
    gen_seconds: float
    created_at: float
    """When it was planned, on the planner's clock."""
    version: int = 0
    """The tree version that inserted it."""
    next_fingerprint: str | None = None
    """The state this event leaves behind, when its effects change the state."""
    origin: str = "planned"
    """``planned`` (the planner wrote it ahead) or ``answered`` (kept from a score or live
    answer to an event, so the next such event is a hit; never counted as planned work)."""

    def to_row(self) -> list[Any]:
        """A compact JSON row for snapshots."""
        return [
            self.fingerprint,
            self.key.as_json(),
            self.action,
            self.compact,
            self.probability,
            self.model_id,
            self.tokens,
            self.gen_seconds,
            self.created_at,
            self.version,
            self.next_fingerprint,
            self.origin,
        ]

    @classmethod
    def from_row(cls, row: list[Any]) -> PolicyNode:
        """Inverse of :meth:`to_row`."""
        # Rows of 11 fields were written before ``origin`` existed: planned branches.
        fp, key, action, compact, p, model, tokens, gen_s, created, version, nxt = row[:11]
        origin = str(row[11]) if len(row) > 11 else "planned"
        return cls(
            str(fp),
            EventKey.from_json(key),
            dict(action),
            str(compact),
            float(p),
            str(model),
            int(tokens),
            float(gen_s),
            float(created),
            int(version),
            None if nxt is None else str(nxt),
            origin,
        )


class PolicyTree:
    """Bounded store of precomputed actions with O(1) lookup.

    Args:
        max_nodes: the most branches kept; inserting past it evicts the least valuable.
        on_evict: called with each evicted node (the planner wakes on evictions).
        check: called with each node's action before it enters; raises (InvalidAction) to
            keep it out. The agent passes the validator of record, so a lookup never needs to
            validate again: the tree holds only valid actions.

    """

    def __init__(
        self,
        *,
        max_nodes: int = 10_000,
        on_evict: Callable[[PolicyNode], None] | None = None,
        check: Callable[[dict[str, Any]], object] | None = None,
    ) -> None:
        if max_nodes < 1:
            raise ConfigError("max_nodes", max_nodes, "must be at least 1")
        self._max = max_nodes
        self._on_evict = on_evict
        self._check = check
        # networkx takes a third of a second to import: paid by the first tree, not by every
        # program that imports the policies (``forethought check`` never makes a tree).
        import networkx as nx  # noqa: PLC0415

        self._graph: nx.DiGraph = nx.DiGraph()
        self._index: dict[tuple[str, EventKey], PolicyNode] = {}
        self._heap: list[tuple[float, float, int, str, EventKey]] = []
        self._live_seq: dict[tuple[str, EventKey], int] = {}
        self._seq = itertools.count()
        self._version = 0
        self._used: set[tuple[str, EventKey]] = set()
        self.answer_hits = 0
        """Events answered by a branch kept from an earlier answer (not planned work)."""
        self.evictions = 0
        self.evicted_unused = 0

    @property
    def graph(self) -> nx.DiGraph:
        """The underlying graph (read it; mutate only through the tree)."""
        return self._graph

    @property
    def version(self) -> int:
        """Increases with every change."""
        return self._version

    @property
    def max_nodes(self) -> int:
        """The node cap."""
        return self._max

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, item: tuple[str, EventKey]) -> bool:
        return item in self._index

    def lookup(self, fingerprint: str, key: EventKey) -> PolicyNode | None:
        """The precomputed node for ``key`` in state ``fingerprint``, or None."""
        return self._index.get((fingerprint, key))

    def admit_only(self, check: Callable[[dict[str, Any]], object]) -> int:
        """From now on, admit only actions ``check`` accepts.

        Nodes already here that it refuses are dropped; returns how many.
        """
        self._check = check
        dropped = 0
        for node in self.nodes():
            try:
                check(node.action)
            except Exception:  # whatever the check raises refuses the node
                self.remove(node.fingerprint, node.key)
                dropped += 1
        return dropped

    def touch(self, node: PolicyNode) -> None:
        """Record that ``node`` answered an event (what the waste figures count).

        A branch kept from an answer is counted apart (``answer_hits``): the waste figures
        judge the planner's own work.
        """
        if node.origin == "planned":
            self._used.add((node.fingerprint, node.key))
        else:
            self.answer_hits += 1

    def was_used(self, fingerprint: str, key: EventKey) -> bool:
        """Whether the branch ``(fingerprint, key)`` ever answered an event."""
        return (fingerprint, key) in self._used

    @property
    def used(self) -> int:
        """Distinct branches that answered at least one event (evicted ones included)."""
        return len(self._used)

    def branches(self, fingerprint: str) -> Iterator[PolicyNode]:
        """Every branch planned under the state ``fingerprint``."""
        root = ("s", fingerprint)
        if root in self._graph:
            for child in self._graph.successors(root):
                node = self._graph.nodes[child].get("node")
                if node is not None:
                    yield node

    def nodes(self) -> Iterator[PolicyNode]:
        """Every branch."""
        return iter(list(self._index.values()))

    def insert(
        self, node: PolicyNode, *, checked_by: Callable[[dict[str, Any]], object] | None = None
    ) -> PolicyNode:
        """Add or replace a branch; returns it as stored (with this tree's version).

        Raises what ``check`` raises when the action is refused (the tree is unchanged).
        ``checked_by``: the check the caller has just passed the action through; when it is
        this tree's own, the action is not checked a second time.
        """
        if self._check is not None and checked_by != self._check:
            self._check(node.action)
        self._version += 1
        node = replace(node, version=self._version)
        ident = (node.fingerprint, node.key)
        root = ("s", node.fingerprint)
        branch = ("b", node.fingerprint, node.key)
        if ident in self._index:
            old = self._index[ident]
            if old.next_fingerprint is not None:
                self._graph.remove_edge(branch, ("s", old.next_fingerprint))
        self._graph.add_edge(root, branch)
        self._graph.nodes[branch]["node"] = node
        if node.next_fingerprint is not None and node.next_fingerprint != node.fingerprint:
            self._graph.add_edge(branch, ("s", node.next_fingerprint))
        self._index[ident] = node
        seq = next(self._seq)
        self._live_seq[ident] = seq
        heapq.heappush(self._heap, (node.probability, node.created_at, seq, *ident))
        while len(self._index) > self._max:
            self._evict_one()
        return node

    def remove(self, fingerprint: str, key: EventKey) -> PolicyNode | None:
        """Drop one branch; returns it, or None if absent."""
        ident = (fingerprint, key)
        node = self._index.pop(ident, None)
        if node is None:
            return None
        self._live_seq.pop(ident, None)
        self._version += 1
        branch = ("b", fingerprint, key)
        self._graph.remove_node(branch)
        for root in {("s", fingerprint), ("s", node.next_fingerprint)}:
            if root in self._graph and self._graph.degree(root) == 0:
                self._graph.remove_node(root)
        return node

    def _evict_one(self) -> None:
        while self._heap:
            _, _, seq, fp, key = heapq.heappop(self._heap)
            if self._live_seq.get((fp, key)) != seq:
                continue  # replaced or removed since: a stale heap entry
            node = self.remove(fp, key)
            self.evictions += 1
            planned = node is not None and node.origin == "planned"
            self.evicted_unused += planned and (fp, key) not in self._used
            if node is not None and self._on_evict is not None:
                self._on_evict(node)
            return

    # -- snapshots ----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], *, schema: str, model_id: str) -> None:
        """Write a snapshot atomically: a crash leaves the old file or the new, never a mix."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        nodes = orjson.dumps([n.to_row() for n in self._index.values()])
        payload = orjson.dumps(
            {
                "format": _FORMAT,
                "schema": schema,
                "model": model_id,
                "version": self._version,
                "checksum": hashlib.sha256(nodes).hexdigest(),
                "nodes": orjson.Fragment(nodes),
            }
        )
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        # Owner-only: a snapshot is a list of actions the robot will take.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with open(fd, "wb") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            # A failed write (disk full, fsync or rename refused) leaves the old snapshot as it
            # was and no half-written file beside it.
            tmp.unlink(missing_ok=True)
            raise
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # make the rename itself durable
        finally:
            os.close(dir_fd)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        schema: str,
        model_id: str,
        max_nodes: int = 10_000,
        on_evict: Callable[[PolicyNode], None] | None = None,
    ) -> PolicyTree:
        """Read a snapshot; raises SnapshotError (``corrupt`` or ``mismatch``)."""
        where = str(path)
        try:
            data = orjson.loads(Path(path).read_bytes())
        except (OSError, ValueError) as exc:
            raise SnapshotError(where, "corrupt", f"unreadable ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise SnapshotError(where, "corrupt", "not a policy-tree snapshot")
        rows = data.get("nodes")
        stored_schema, stored_model = data.get("schema"), data.get("model")
        if not isinstance(rows, list):
            raise SnapshotError(where, "corrupt", "no node list")
        if stored_schema != schema:
            raise SnapshotError(
                where, "mismatch", f"made for action schema {stored_schema}, not {schema}"
            )
        if stored_model != model_id:
            raise SnapshotError(
                where, "mismatch", f"made with model {stored_model!r}, not {model_id!r}"
            )
        checksum = hashlib.sha256(orjson.dumps(rows)).hexdigest()
        if data.get("checksum") != checksum:
            raise SnapshotError(where, "corrupt", "the nodes do not match their checksum")
        tree = cls(max_nodes=max_nodes, on_evict=on_evict)
        try:
            for row in rows:
                tree.insert(PolicyNode.from_row(row))
        except (ValueError, KeyError, TypeError) as exc:
            raise SnapshotError(where, "corrupt", f"bad node ({exc})") from None
        tree._version = max(tree._version, int(data.get("version", 0)))
        return tree
