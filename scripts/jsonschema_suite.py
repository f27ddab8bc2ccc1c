"""Replay the JSON-Schema-Test-Suite (draft 2020-12) through ActionSchema, each group's schema
nested as the property ``v`` of an action, and count what loads and what disagrees.

    .venv/bin/python scripts/jsonschema_suite.py PATH/TO/JSON-Schema-Test-Suite [--json OUT]

The suite is public (json-schema-org/JSON-Schema-Test-Suite) and is read from a checkout; none
of it is copied here. Local references are re-rooted (``#/x`` -> ``#/properties/v/x``) so a
nested group means what it meant alone. The suite's ``format.json`` checks that ``format`` is
an annotation by default; Forethought asserts the formats it declares, so those groups are
checked against ``optional/format/<name>.json`` instead (reported on their own line).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from forethought.policies import ActionSchema, ForethoughtError, InvalidAction


def _reroot(schema: Any, top: bool = True) -> Any:
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if top and k == "$id":
                continue  # the group's root id; nested it would name a subschema
            if k == "$ref" and isinstance(v, str) and (v == "#" or v.startswith("#/")):
                out[k] = "#/properties/v" + v[1:]
            elif k in ("enum", "const"):
                out[k] = v  # data, not schemas
            else:
                out[k] = _reroot(v, top=False)
        return out
    if isinstance(schema, list):
        return [_reroot(v, top=False) for v in schema]
    return schema


def _run_file(path: Path, totals: dict[str, Any], label: str) -> None:
    for group in orjson.loads(path.read_bytes()):
        action = {
            "type": "object",
            "properties": {"v": _reroot(group["schema"])},
            "required": ["v"],
        }
        try:
            schema = ActionSchema.from_json_schema(action)
        except ForethoughtError:
            totals[label]["refused"] += 1
            continue
        except Exception:  # an unclear crash instead of a refusal: counted
            totals[label]["crashed"] += 1
            continue
        totals[label]["loaded"] += 1
        for test in group["tests"]:
            try:
                schema.validate({"v": test["data"]})
                ours = True
            except InvalidAction:
                ours = False
            totals[label]["tests"] += 1
            if ours != test["valid"]:
                totals[label]["disagree"].append(
                    f"{path.name}: {group['description']} / {test['description']}"
                )


def main() -> int:
    """Replay and print the counts."""
    ap = argparse.ArgumentParser()
    ap.add_argument("suite", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    root = args.suite / "tests" / "draft2020-12"
    totals: dict[str, Any] = {
        k: {"loaded": 0, "refused": 0, "crashed": 0, "tests": 0, "disagree": []}
        for k in ("required", "asserted formats")
    }
    for path in sorted(root.glob("*.json")):
        if path.name == "format.json":
            continue  # annotation-only semantics; see the asserted formats below
        _run_file(path, totals, "required")
    for path in sorted((root / "optional" / "format").glob("*.json")):
        _run_file(path, totals, "asserted formats")
    for label, t in totals.items():
        print(
            f"{label}: {t['loaded']} groups loaded, {t['refused']} refused, "
            f"{t['crashed']} crashed at load; "
            f"{t['tests']} tests, {len(t['disagree'])} disagree"
        )
        for line in t["disagree"][:20]:
            print(f"  {line}")
    if args.json:
        args.json.write_bytes(orjson.dumps(totals, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
