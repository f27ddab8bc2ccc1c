"""Bounded vs unbounded grammars, side by side in one run (issue 14's "CPU not worse").

Both grammars, SmolLM2 in process on the CPU. "unbounded" compiles the schema as written (the
grammar before bounds existed); "bounded" is what Forethought compiles now. Variants are
interleaved within each round; the table gives medians.

    .venv/bin/python scripts/compare_bounded_grammar.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

import forethought.models.grammar._compilers as grammar_module
from forethought.models import TransformersBackend
from forethought.policies import ActionForm, ActionSchema

ROBOT = {
    "type": "object",
    "properties": {
        "action": {"enum": ["stop", "slow", "go", "turn_left", "turn_right", "dock"]},
        "speed": {"type": "number", "minimum": 0, "maximum": 1.5},
    },
    "required": ["action"],
}
FREE = {
    "type": "object",
    "properties": {
        "action": {"enum": ["stop", "slow", "go"]},
        "speed": {"type": "number"},
        "note": {"type": "string"},
    },
    "required": ["action", "speed", "note"],
}
SCHEMAS = {"robot": ROBOT, "free": FREE}
TEXTS = {"robot": '{"a":"slow","s":0.4}', "free": '{"a":"stop","s":1.25,"n":"hello there"}'}
EVENTS = ["obstacle ahead at 0.4 m", "low battery 12%", "human waves at the robot", "path clear"]
GRAMMARS = ("llguidance", "xgrammar")
VARIANTS = ("unbounded", "bounded")


def _unbounded(schema: Any, bounds: Any = None, *, precision: bool = True) -> Any:
    return schema


def _backends() -> dict[tuple[str, str], TransformersBackend]:
    bounded = grammar_module.bounded_schema
    out = {}
    for grammar in GRAMMARS:
        for variant in VARIANTS:
            backend = TransformersBackend(
                model="smollm2-135m", device="cpu", dtype="float32", grammar=grammar
            )
            backend.load()
            # Grammars compile once per schema at prepare: swap the bounds out around it.
            grammar_module.bounded_schema = _unbounded if variant == "unbounded" else bounded  # type: ignore[assignment]
            try:
                for raw in SCHEMAS.values():
                    backend.prepare_sync(ActionSchema.from_json_schema(raw))
            finally:
                grammar_module.bounded_schema = bounded  # type: ignore[assignment]
            out[(grammar, variant)] = backend
    return out


def _mask_us(backend: TransformersBackend, name: str) -> float:
    schema = ActionSchema.from_json_schema(SCHEMAS[name])
    compiler = backend.grammar_compiler
    compiled = compiler.compile(schema.json_schema(ActionForm.COMPACT))
    mask, matcher = compiler.allocate_mask(1), compiler.matcher(compiled)
    ids = backend.loaded.tokenizer.encode(TEXTS[name], add_special_tokens=False)
    t = time.perf_counter()
    for token in ids:
        matcher.fill_mask(mask, 0)
        assert matcher.accept(token)
    return (time.perf_counter() - t) / len(ids) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    backends = _backends()
    calls: dict[tuple[str, str, int, str], list[float]] = {}
    texts: dict[tuple[str, str, int, str], str] = {}
    masks: dict[tuple[str, str, str], list[float]] = {}
    for _ in range(args.rounds):
        for (grammar, variant), backend in backends.items():
            for name, raw in SCHEMAS.items():
                schema = ActionSchema.from_json_schema(raw)
                masks.setdefault((grammar, name, variant), []).append(_mask_us(backend, name))
                for batch in (1, 4):
                    t = time.perf_counter()
                    gens = backend.generate_sync(
                        "You steer a warehouse robot.", EVENTS[:batch], schema, deadline=math.inf
                    )
                    key = (grammar, name, batch, variant)
                    calls.setdefault(key, []).append(time.perf_counter() - t)
                    texts[key] = " ".join(g.text for g in gens)
    print(f"{args.rounds} interleaved rounds, medians; call = one generate_sync of the batch")
    print("| grammar | schema | batch | unbounded ms | bounded ms | ratio | same text |")
    print("|---|---|---|---|---|---|---|")
    for grammar in GRAMMARS:
        for name in SCHEMAS:
            for batch in (1, 4):
                u, b = (statistics.median(calls[(grammar, name, batch, v)]) * 1e3 for v in VARIANTS)
                same = (
                    texts[(grammar, name, batch, "unbounded")]
                    == texts[(grammar, name, batch, "bounded")]
                )
                print(
                    f"| {grammar} | {name} | {batch} | {u:.1f} | {b:.1f} | {b / u:.2f} | {same} |"
                )
    print("| grammar | schema | mask us/token unbounded | bounded |")
    print("|---|---|---|---|")
    for grammar in GRAMMARS:
        for name in SCHEMAS:
            u, b = (statistics.median(masks[(grammar, name, v)]) for v in VARIANTS)
            print(f"| {grammar} | {name} | {u:.1f} | {b:.1f} |")


if __name__ == "__main__":
    main()
