"""``forethought tree``: what a policy tree holds (keys, actions, model, age), or would hold.

Given a snapshot, every branch, grouped by the state it was planned in. Given a spec (or a
scenario), the branches the planner would write in one state (the initial state, patched by
``--state``): each event key of each type under the fingerprint that type's decisions depend
on, with the snapshot's answer when ``--snapshot`` is given, else "not planned". No model is
loaded. Ages are relative to the newest branch (the planner's clock is not the wall clock).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import orjson

from forethought.policies import (
    AgentSpec,
    ConfigError,
    PolicyNode,
    PolicyTree,
    SnapshotError,
    WorldState,
)
from forethought.policies.internals import StateDomain, load_document

__all__ = ["run_tree"]

_SNAPSHOT_FORMAT = "forethought.policy-tree/"


def _snapshot(path: Path) -> tuple[PolicyTree, dict[str, Any]] | None:
    """The tree in ``path`` and its header, or None when ``path`` is not a snapshot."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict) or not str(data.get("format", "")).startswith(_SNAPSHOT_FORMAT):
        return None
    tree = PolicyTree.load(
        path, schema=str(data.get("schema")), model_id=str(data.get("model")), max_nodes=1 << 30
    )
    return tree, {k: data.get(k) for k in ("format", "schema", "model", "version")}


def _line(node: PolicyNode, newest: float) -> str:
    age = newest - node.created_at
    return (
        f"    {node.key.describe():<40} {orjson.dumps(node.action).decode()}  "
        f"(model {node.model_id}, p {node.probability:.3f}, {age:.1f} s before the newest)"
    )


def _print_snapshot(tree: PolicyTree, header: dict[str, Any], out: TextIO) -> None:
    nodes = sorted(tree.nodes(), key=lambda n: (n.fingerprint, n.key.type, n.key.params))
    newest = max((n.created_at for n in nodes), default=0.0)
    print(
        f"snapshot {header['format']}: {len(nodes)} branches, model {header['model']}, "
        f"schema {header['schema']}",
        file=out,
    )
    by_state: dict[str, list[PolicyNode]] = {}
    for n in nodes:
        by_state.setdefault(n.fingerprint, []).append(n)
    for fp, group in by_state.items():
        print(f"  state {fp}: {len(group)} branches", file=out)
        for n in group:
            print(_line(n, newest), file=out)


def _state_patch(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        patch = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError("--state", text, f"not JSON: {exc}") from None
    if not isinstance(patch, dict):
        raise ConfigError("--state", text, 'a JSON object, e.g. {"zone": "blocked"}')
    return patch


def _print_spec(path: Path, state_text: str | None, snapshot: Path | None, out: TextIO) -> None:
    from forethought.sims import load_spec  # noqa: PLC0415 - spec or scenario file

    spec = load_spec(path)
    patch = _state_patch(state_text)
    state = spec.initial_state().patched(patch)
    if patch:
        _warn_unreached(spec, state, patch)
    tree: PolicyTree | None = None
    if snapshot is not None:
        if not snapshot.is_file():
            raise ConfigError("--snapshot", str(snapshot), "not found (no such file)")
        found = _snapshot(snapshot)
        if found is None:
            raise SnapshotError(str(snapshot), "corrupt", "not a policy-tree snapshot")
        tree = found[0]
    nodes: Iterable[PolicyNode] = tree.nodes() if tree is not None else ()
    newest = max((n.created_at for n in nodes), default=0.0)
    space = spec.event_space()
    print(f"{spec.name}: state {state.to_json()}", file=out)
    planned = total = 0
    for name in space.types:
        fp = state.fingerprint_for(name)
        fields = spec.state_abstraction().fields_for(name)
        on = ", ".join(fields) if fields is not None else "every field"
        print(f"  {name}  (state {fp}, depends on {on or 'no field'})", file=out)
        for key in space:
            if key.type != name:
                continue
            total += 1
            node = tree.lookup(fp, key) if tree is not None else None
            if node is None:
                print(f"    {key.describe():<40} not planned", file=out)
            else:
                planned += 1
                print(_line(node, newest), file=out)
    print(f"{planned} of {total} keys planned in this state", file=out)


def _warn_unreached(spec: AgentSpec, state: WorldState, patch: dict[str, Any]) -> None:
    """Warn (standard error) when no chain of event effects leads to ``state``.

    The planner plans ahead only for states the initial one and effects reach; a state set from
    outside (``agent.update_state``) finds nothing planned until the planner catches up.
    """
    from forethought.commands._check import reachable_states  # noqa: PLC0415 - same layer, no model

    states, capped = reachable_states(spec)
    if capped or state.fingerprint in {s.fingerprint for s in states}:
        return
    print(
        f"warning --state: no event effect leads from the initial state to {state.to_json()}: "
        "the planner does not plan ahead for it (an update_state() setting it finds no tree "
        "answer until the planner catches up)",
        file=sys.stderr,
    )
    for problem in StateDomain.of(spec).unknown(patch, "--state"):
        print(problem.line(), file=sys.stderr)


def run_tree(path: Path, *, state: str | None, snapshot: Path | None, out: TextIO) -> int:
    """``forethought tree``: print a snapshot's branches, or a spec's keys in one state."""
    found = _snapshot(path)
    if found is not None:
        if state is not None:
            raise ConfigError(
                "--state", state, "fingerprints are hashes: give the spec, with --snapshot"
            )
        _print_snapshot(*found, out)
        return 0
    load_document(path)  # a clear error for a file that is neither
    _print_spec(path, state, snapshot, out)
    return 0
