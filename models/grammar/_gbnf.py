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
import os.path
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from forethought.policies import SchemaError

from ._bounds import OutputBounds
from ._gbnf_numbers import NumberRange, number_gbnf

__all__ = ["Opening", "action_gbnf", "action_opening", "token_gbnf"]


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

    def string_inner(self, schema: Mapping[str, Any]) -> str:
        """The characters between a string's quotes ("" when it must be empty)."""
        low = int(schema.get("minLength", 0))
        high = int(schema.get("maxLength", low + self.bounds.string_chars))
        return _repeat(self.char(), low, high)

    def string(self, schema: Mapping[str, Any]) -> str:
        inner = self.string_inner(schema)
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
        literals = _literals(schema)
        if literals is not None:
            return self.rule(hint, " | ".join(_literal(t) for t in literals))
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
        if not schema.get("properties"):
            return self.rule(hint, '"{" "}"')
        return self.rule(hint, f'"{{" {self.members(schema, hint)} "}}"')

    def members(self, schema: Mapping[str, Any], hint: str, skip: int = 0) -> str:
        """An object's members, between its braces, less their first ``skip`` characters.

        ``skip`` > 0 only where the first declared property is required: then every object
        writes it first, and the characters skipped are its key's and its value's opening.
        """
        props: Mapping[str, Any] = schema["properties"]
        required = set(schema.get("required", []))
        names = list(props)
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
        if skip:
            key = orjson.dumps(names[0]).decode() + ":"
            first = props[names[0]]
            if skip < len(key):
                parts = [_literal(key[skip:]), self.value(first, f"{hint}-{names[0]}")]
            else:
                parts = [self.after(first, skip - len(key), f"{hint}-{names[0]}")]
            return " ".join([*parts, rest[1]]).strip()
        # The first property written: any optional one before the first required one, or
        # that required one (every property before it skipped).
        firsts = []
        for i, name in enumerate(names):
            firsts.append(f"{pairs[i]} {rest[i + 1]}".strip())
            if name in required:
                break
        inner = " | ".join(firsts)
        optional = "?" if not required & set(names) else ""
        return f"({inner}){optional}"

    def after(self, schema: Any, skip: int, hint: str) -> str:
        """The rule of ``schema``'s values less their first ``skip`` characters.

        ``skip`` is at most the length of the values' :func:`_opening`, the text every value
        starts with, so the characters left out are the same for all of them.
        """
        if skip == 0:
            return self.value(schema, hint)
        literals = _literals(schema)
        if literals is not None:
            tails = [lit[skip:] for lit in literals]
            body = " | ".join(_literal(t) for t in dict.fromkeys(tails) if t)
            if not body:
                return ""  # the whole value was the opening: nothing left to write
            return self.rule(f"{hint}-after", f"({body})?" if "" in tails else body)
        kind = schema.get("type")
        if kind == "string":
            return self.rule(f"{hint}-after", f'{self.string_inner(schema)} "\\""'.strip())
        assert kind == "object", "only literals, strings and objects have an opening"
        if not schema.get("properties"):
            return self.rule(f"{hint}-after", '"}"')
        members = self.members(schema, hint, skip - 1)
        return self.rule(f"{hint}-after", f'{members} "}}"')

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


def _literals(schema: Any) -> list[str] | None:
    """The JSON texts of a ``const`` or ``enum`` schema's values (None: not such a schema)."""
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        return [orjson.dumps(schema["const"]).decode()]
    if "enum" in schema:
        return [orjson.dumps(v).decode() for v in schema["enum"]]
    return None


def _opening(schema: Any) -> tuple[str, list[str]]:
    """The text every value of ``schema`` starts with, and the known ways on from it.

    An object whose first declared property is required opens with that key and that value's
    opening; a string with its quote; an enum with its values' common prefix (the ways on are
    the rest of each value). Anything else opens with nothing, or an object's brace.
    """
    literals = _literals(schema)
    if literals is not None:
        head = os.path.commonprefix(literals)  # noqa: RUF071 - characters, not paths
        return head, [lit[len(head) :] for lit in literals]
    if not isinstance(schema, Mapping) or "anyOf" in schema:
        return "", []  # anyOf: each option may open otherwise (it may replace the properties)
    kind = schema.get("type")
    if kind == "string":
        return '"', []
    if kind != "object":
        return "", []
    props: Mapping[str, Any] = schema.get("properties", {})
    names = list(props)
    if not names or names[0] not in set(schema.get("required", [])):
        return "{", []
    text, ways = _opening(props[names[0]])
    return "{" + orjson.dumps(names[0]).decode() + ":" + text, ways


@dataclass(frozen=True, slots=True)
class Opening:
    """What every compact action of a schema starts with: a server is sent it as prompt.

    An inference server decodes every token its grammar forces as one step; the opening (e.g.
    ``{"a":"``) is known before the call, so it goes with the prompt, prefilled in the same
    pass, and the grammar (:func:`action_gbnf` with ``skip``) starts where it ends.
    """

    text: str
    ways_on: tuple[str, ...]
    """Every continuation right after :attr:`text` when they are known (an enum's values; ""
    where a value may end there), else empty: for tokenizing the opening as the model would go
    on, so a last token that merges with what follows is not forced."""


def action_opening(schema: Mapping[str, Any]) -> Opening:
    """The :class:`Opening` of the compact JSON Schema ``schema``."""
    text, ways = _opening(schema)
    return Opening(text, tuple(ways))


def action_gbnf(
    schema: Mapping[str, Any], bounds: OutputBounds | None = None, *, skip: int = 0
) -> str:
    """The GBNF grammar of the compact JSON Schema ``schema``: no whitespace, bounded values.

    ``skip``: the grammar of what follows the first ``skip`` characters of the schema's
    :func:`action_opening` (at most its length), which the caller sent with the prompt.
    """
    opening = action_opening(schema).text
    if not 0 <= skip <= len(opening):
        raise ValueError(f"skip {skip} is outside the opening {opening!r}")
    g = _Grammar(bounds or OutputBounds())
    return g.render(g.after(schema, skip, "action") or '""')


def token_gbnf(token_ids: Sequence[int]) -> str:
    """A grammar that accepts exactly ``token_ids``, token by token."""
    if not token_ids:
        raise ValueError("a token grammar needs at least one token")
    return "root ::= " + " ".join(f"<[{int(t)}]>" for t in token_ids) + "\n"
