"""Output bounds: how long a generated action can possibly be, decided before it is written.

A JSON grammar on its own lets a number run on (``0.5575755555…``) and a string grow until
``max_new_tokens``: one such row holds every other row of a batch, and the latency model cannot
predict an action's length. Every grammar Forethought compiles is therefore *bounded*:

* numbers get a bounded precision -- ``multipleOf`` as the schema gives it, else ``x-decimals``
  digits after the point, else :attr:`OutputBounds.decimals` -- and a bounded integer part
  (``minimum``/``maximum`` as given, else :attr:`OutputBounds.integer_digits` digits), with no
  exponent;
* strings at most ``maxLength`` characters (else ``minLength`` plus
  :attr:`OutputBounds.string_chars`), arrays at most ``maxItems`` items (else their least
  count plus :attr:`OutputBounds.array_items`).

:func:`bounded_schema` writes these bounds into a JSON Schema as plain keywords (what the
JSON-Schema grammar compilers enforce), :mod:`._gbnf` writes them into GBNF, and
:func:`max_output_chars` gives the longest text either allows: a hard cap on the tokens a
call may take, since every token spells at least one character. The bounds only narrow what
may be written; each parsed action is still validated against the schema as the user wrote it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["OutputBounds", "bounded_schema", "max_output_chars"]


@dataclass(frozen=True, slots=True)
class OutputBounds:
    """Limits on what a generated value may spell out where the schema sets none."""

    decimals: int = 3
    integer_digits: int = 12
    string_chars: int = 64
    """Characters a string may have beyond its ``minLength`` where it sets no ``maxLength``."""
    array_items: int = 16
    """Items an array may have beyond its least count where it sets no ``maxItems``."""
    compiler_decimals: int = 0
    """Decimals a compiled grammar may write whatever the schema asks: xgrammar ignores
    ``multipleOf`` and encodes ranges with up to 6 decimals, so its lengths are counted with 6."""

    def largest(self) -> int:
        """The largest magnitude an integer part may have where the schema sets no bound."""
        return int(10**self.integer_digits) - 1


def _kinds(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    return set()


def bounded_schema(
    schema: Any, bounds: OutputBounds | None = None, *, precision: bool = True
) -> Any:
    """``schema`` with the output bounds as JSON-Schema keywords, wherever it sets none.

    Numbers get ``multipleOf`` (10^-decimals; not with ``precision=False``, for a compiler that
    ignores it) and ``minimum``/``maximum``; integers the latter; strings ``maxLength``; arrays
    ``maxItems``. Nested schemas (properties, items, ``anyOf``) are bounded the same way;
    nothing the schema already says is changed.
    """
    b = bounds or OutputBounds()
    if isinstance(schema, list):
        return [bounded_schema(s, b, precision=precision) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions", "patternProperties"):
            out[key] = {k: bounded_schema(v, b, precision=precision) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "prefixItems", "anyOf", "oneOf",
                     "allOf"):  # fmt: skip
            out[key] = bounded_schema(value, b, precision=precision)
        else:
            out[key] = value
    if "enum" not in out and "const" not in out:
        _add_bounds(out, b, precision=precision)
    return out


def _add_bounds(out: dict[str, Any], b: OutputBounds, *, precision: bool) -> None:
    """Add the missing bound keywords of one (non-enum) schema level, in place."""
    kinds = _kinds(out)
    if kinds & {"number", "integer"}:
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = -b.largest()
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = b.largest()
    if precision and "number" in kinds and "multipleOf" not in out:
        decimals = int(out.get("x-decimals", b.decimals))
        out["multipleOf"] = 10.0**-decimals if decimals > 0 else 1
    if "string" in kinds and "maxLength" not in out:
        out["maxLength"] = _max_length(out, b)
    if "array" in kinds and "maxItems" not in out:
        out["maxItems"] = _max_items(out, b)


def _max_length(s: Mapping[str, Any], b: OutputBounds) -> int:
    """A string's bound where it sets none: its minimum plus the default allowance."""
    return int(s.get("minLength", 0)) + b.string_chars


def _max_items(s: Mapping[str, Any], b: OutputBounds) -> int:
    """An array's bound where it sets none: its least count plus the default allowance."""
    least = max(int(s.get("minItems", 0)), len(s.get("prefixItems", [])))
    return least + b.array_items


def max_output_chars(schema: Mapping[str, Any], bounds: OutputBounds | None = None) -> int | None:
    """The longest compact text the grammar allows, or None where it is unbounded (any JSON)."""
    return _size(schema, bounds or OutputBounds())


def _size(s: Any, b: OutputBounds) -> int | None:
    if not isinstance(s, Mapping) or not s:
        return None
    if "const" in s:
        return len(orjson.dumps(s["const"]))
    if "enum" in s:
        return max(len(orjson.dumps(v)) for v in s["enum"])
    if "anyOf" in s:
        rest = {k: v for k, v in s.items() if k != "anyOf"}
        sizes = [_size({**rest, **o}, b) for o in s["anyOf"]]
        return None if any(x is None for x in sizes) else max(x or 0 for x in sizes)
    kind = s.get("type")
    if kind == "string":
        return 2 + 6 * int(s.get("maxLength", _max_length(s, b)))  # a \\uXXXX escape each
    if kind in ("integer", "number"):
        decimals = max(int(s.get("x-decimals", b.decimals)), b.compiler_decimals)
        frac = 1 + decimals if kind == "number" else 0
        return 1 + _integer_digits(s, b) + frac
    if kind in ("boolean", "null"):
        return 5 if kind == "boolean" else 4
    if kind == "object":
        return _object_size(s, b)
    if kind == "array":
        return _array_size(s, b)
    return None


def _integer_digits(s: Mapping[str, Any], b: OutputBounds) -> int:
    """Digits of the integer part: as the schema's range allows, else the default bound."""
    ends = [s.get(k) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")]
    widths = [
        len(str(int(abs(x))))
        for x in ends
        if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
    ]
    return max([b.integer_digits, *widths])


def _object_size(s: Mapping[str, Any], b: OutputBounds) -> int | None:
    total = 2
    for k, v in s.get("properties", {}).items():
        inner = _size(v, b)
        if inner is None:
            return None
        total += len(orjson.dumps(k)) + 2 + inner
    return total


def _array_size(s: Mapping[str, Any], b: OutputBounds) -> int | None:
    items = [_size(x, b) for x in s.get("prefixItems", [])]
    high = int(s.get("maxItems", _max_items(s, b)))
    item = _size(s.get("items", {}), b) if high > len(items) else 0
    if item is None or any(x is None for x in items):
        return None
    return 2 + sum((x or 0) + 1 for x in items) + (item + 1) * (high - len(items))
