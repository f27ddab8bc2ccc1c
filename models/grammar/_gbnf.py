"""GBNF: the compact action grammar in the form llama.cpp's server (and xgrammar) reads.

Servers have JSON-Schema modes of their own, but they allow whitespace between tokens and
write numbers and strings without bound, so a small model pads its answer and a number can
run until ``max_new_tokens``. :func:`action_gbnf` writes the grammar of one compact schema
(:meth:`ActionSchema.json_schema`) with:

* no whitespace anywhere (the compact form's ``","`` and ``":"``);
* object properties in declared order, optional ones optional;
* numbers only within the schema's range (``minimum``/``maximum``, exclusive ones too; else
  +-:meth:`OutputBounds.largest`), as llguidance and xgrammar enforce it, with at most
  ``x-decimals`` (or ``multipleOf`` = 10^-k) or :attr:`OutputBounds.decimals` decimals and no
  exponent (:mod:`._gbnf_numbers`); integers without a fraction;
* strings and arrays bounded as :mod:`._bounds` says (``maxLength`` / ``maxItems``, else the
  least plus :attr:`OutputBounds.string_chars` / :attr:`OutputBounds.array_items`).

The bounds only narrow what may be written; every parsed action is still validated against the
schema as the user wrote it, which decides (``pattern`` and ``multipleOf`` included).

:func:`token_gbnf` writes a grammar of exact token ids (``<[id]>``), which is how a candidate
action is scored on a server: a string literal would be re-tokenized by the server and could
come out as other tokens than the ones whose likelihood we want.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from forethought.policies import SchemaError

from ._bounds import OutputBounds
from ._gbnf_numbers import NumberRange, number_gbnf

__all__ = ["action_gbnf", "token_gbnf"]


def _literal(text: str) -> str:
    """A GBNF string literal matching ``text`` exactly."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _json_literal(value: Any) -> str:
    return _literal(orjson.dumps(value).decode())


def _repeat(atom: str, low: int, high: int) -> str:
    if high <= 0:
        return ""
    if low == high:
        return f"{atom}{{{low}}}"
    return f"{atom}{{{low},{high}}}"


def _decimals(schema: Mapping[str, Any], bounds: OutputBounds) -> int:
    """Decimals a number may have: ``x-decimals``, a ``multipleOf`` of 10^-k, else the bound."""
    if "x-decimals" in schema:
        return int(schema["x-decimals"])
    step = schema.get("multipleOf")
    if isinstance(step, int | float) and not isinstance(step, bool) and 0 < step <= 1:
        k = round(-math.log10(step))
        if math.isclose(step, 10.0**-k):
            return k
    return bounds.decimals


class _Grammar:
    """Rules by name, each body written once (equal bodies share one rule)."""

    def __init__(self, bounds: OutputBounds) -> None:
        self.bounds = bounds
        self.rules: dict[str, str] = {}
        self._by_body: dict[str, str] = {}

    def rule(self, hint: str, body: str) -> str:
        name = self._by_body.get(body)
        if name is not None:
            return name
        # GBNF rule names are letters, digits and dashes; property names may be anything.
        hint = "".join(c if c.isascii() and c.isalnum() else "-" for c in hint) or "r"
        name = hint
        n = 1
        while name in self.rules:
            n += 1
            name = f"{hint}{n}"
        self.rules[name] = body
        self._by_body[body] = name
        return name

    # -- primitives ---------------------------------------------------------------------------

    def char(self) -> str:
        return self.rule("char", r'[^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})')

    def string(self, schema: Mapping[str, Any]) -> str:
        low = int(schema.get("minLength", 0))
        high = int(schema.get("maxLength", low + self.bounds.string_chars))
        inner = _repeat(self.char(), low, high)
        return self.rule("string", f'"\\"" {inner} "\\""' if inner else '"\\"\\""')

    def numeric(self, schema: Mapping[str, Any], kind: str) -> str:
        """Numbers (``kind`` "number") or integers of exactly the schema's range."""
        decimals = 0 if kind == "integer" else _decimals(schema, self.bounds)
        allowed = NumberRange(schema, decimals, self.bounds.largest())
        if allowed.empty:
            raise SchemaError(
                "action",
                dict(schema),
                f"no {kind} with at most {decimals} decimals lies in this range; widen it",
            )
        return self.rule(kind, number_gbnf(allowed))

    # -- structure ----------------------------------------------------------------------------

    def value(self, schema: Any, hint: str = "value") -> str:
        """The rule name of ``schema``'s values (a boolean or empty schema: any JSON)."""
        if not isinstance(schema, Mapping) or not schema:
            return self.any_value()
        if "const" in schema:
            return self.rule(hint, _json_literal(schema["const"]))
        if "enum" in schema:
            return self.rule(hint, " | ".join(_json_literal(v) for v in schema["enum"]))
        if "anyOf" in schema:
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            options = [
                self.value({**rest, **o} if isinstance(o, Mapping) else o, hint)
                for o in schema["anyOf"]
            ]
            return self.rule(hint, " | ".join(dict.fromkeys(options)))
        kind = schema.get("type")
        if kind == "object":
            return self.obj(schema, hint)
        if kind == "array":
            return self.array(schema, hint)
        if kind == "string":
            return self.string(schema)
        if kind in ("integer", "number"):
            return self.numeric(schema, kind)
        if kind == "boolean":
            return self.rule("boolean", '"true" | "false"')
        if kind == "null":
            return self.rule("null", '"null"')
        return self.any_value()

    def obj(self, schema: Mapping[str, Any], hint: str) -> str:
        props: Mapping[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        names = list(props)
        if not names:
            return self.rule(hint, '"{" "}"')
        pairs = [
            self.rule(f"{hint}-{k}-kv", f'{_json_literal(k)} ":" {self.value(v, f"{hint}-{k}")}')
            for k, v in props.items()
        ]
        # rest[i]: what may follow once the properties before i were written or skipped:
        # property i, comma-led (optional ones optional), then rest[i + 1].
        rest = [""] * (len(names) + 1)
        for i in range(len(names) - 1, 0, -1):
            step = f'"," {pairs[i]}'
            own = step if names[i] in required else f"({step})?"
            rest[i] = self.rule(f"{hint}-rest", f"{own} {rest[i + 1]}".strip())
        # The first property written: any optional one before the first required one, or
        # that required one (every property before it skipped).
        firsts = []
        for i, name in enumerate(names):
            firsts.append(f"{pairs[i]} {rest[i + 1]}".strip())
            if name in required:
                break
        inner = " | ".join(firsts)
        optional = "?" if not required & set(names) else ""
        return self.rule(hint, f'"{{" ({inner}){optional} "}}"')

    def array(self, schema: Mapping[str, Any], hint: str) -> str:
        prefix = [self.value(s, f"{hint}-{i}") for i, s in enumerate(schema.get("prefixItems", []))]
        items = schema.get("items", {})
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", max(low, len(prefix)) + self.bounds.array_items))
        parts = prefix[:high]
        more_low, more_high = max(low - len(parts), 0), max(high - len(parts), 0)
        if items is False:
            more_high = 0
        body = ' "," '.join(parts)
        if more_high:
            item = self.value(items, f"{hint}-item")
            if parts:
                body += " " + _repeat(f'("," {item})', more_low, more_high)
            else:
                rep = _repeat(f'("," {item})', max(more_low - 1, 0), more_high - 1)
                body = f"{item} {rep}".strip()
                if more_low == 0:
                    body = f"({body})?"
        return self.rule(hint, f'"[" {body} "]"' if body else '"[" "]"')

    def any_value(self) -> str:
        if "any" in self.rules:
            return "any"
        self.rules["any"] = ""  # reserve the name: the body refers to itself
        s = self.string({})
        n = self.numeric({}, "number")
        key_value = f'{s} ":" any'
        self.rules["any"] = (
            f'{s} | {n} | "true" | "false" | "null" | '
            f'"[" (any ("," any)*)? "]" | "{{" ({key_value} ("," {key_value})*)? "}}"'
        )
        return "any"

    def render(self, root: str) -> str:
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        return "\n".join(lines) + "\n"


def action_gbnf(schema: Mapping[str, Any], bounds: OutputBounds | None = None) -> str:
    """The GBNF grammar of the compact JSON Schema ``schema``: no whitespace, bounded values."""
    g = _Grammar(bounds or OutputBounds())
    return g.render(g.value(schema, "action"))


def token_gbnf(token_ids: Sequence[int]) -> str:
    """A grammar that accepts exactly ``token_ids``, token by token."""
    if not token_ids:
        raise ValueError("a token grammar needs at least one token")
    return "root ::= " + " ".join(f"<[{int(t)}]>" for t in token_ids) + "\n"
