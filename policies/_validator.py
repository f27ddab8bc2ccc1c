"""The validator of record: an action is valid exactly when JSON Schema (draft 2020-12) says so.

Every action that can leave the runtime is checked here, against the user's original schema,
by ``jsonschema`` (the reference Python implementation): a tree node when it enters the tree
(planned or loaded from a snapshot), the declared default and candidates at spec load, every
scored and generated action. The grammar the model decodes under enforces what its compiler
supports (llguidance, xgrammar, llama-server's GBNF); this catches the rest, so an action the
schema forbids is never emitted.

A schema is refused at load, with one error naming the keyword and its path, when it uses
something that cannot be honoured without the network or without guessing:

* a ``$ref`` that is not local (``#...``): no code may need the internet at run time;
* ``$dynamicRef`` / ``$dynamicAnchor`` / ``$recursiveRef`` and ``$id`` below the root (their
  resolution depends on where a subschema is used);
* ``format`` values we do not assert (:data:`ASSERTED_FORMATS` are; JSON Schema treats the
  others as annotations, which a reader of the schema would take for a promise);
* ``contentMediaType`` / ``contentEncoding`` / ``contentSchema`` (annotations only in 2020-12).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import best_match

from ._errors import SchemaError

__all__ = ["ASSERTED_FORMATS", "ActionValidator"]

ASSERTED_FORMATS = frozenset({"date", "email", "ipv4", "ipv6", "uuid"})
"""``format`` values whose instances are checked (the rest are refused at load). ``date``,
``ipv4`` and ``ipv6`` use jsonschema's checkers; ``email`` and ``uuid`` our own, because
jsonschema's accept what RFC 5321 and RFC 4122 do not (any text with an ``@``; a UUID with its
dashes elsewhere). ``regex`` is not asserted: Python's ``re`` is not ECMA 262."""

_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL = rf'(?:{_ATEXT}(?:\.{_ATEXT})*|"(?:[^"\\\r\n]|\\.)*")'
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_EMAIL = re.compile(rf"{_LOCAL}@(?P<domain>{_LABEL}(?:\.{_LABEL})*|\[[^\]]+\])", re.ASCII)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _is_email(instance: object) -> bool:
    if not isinstance(instance, str):
        return True  # format applies to strings only
    m = _EMAIL.fullmatch(instance)
    if m is None:
        return False
    domain = m.group("domain")
    if not domain.startswith("["):
        return True
    literal = domain[1:-1]
    try:
        if literal.startswith("IPv6:"):
            ipaddress.IPv6Address(literal[5:])
        else:
            ipaddress.IPv4Address(literal)
    except ValueError:
        return False
    return True


def _is_uuid(instance: object) -> bool:
    return not isinstance(instance, str) or _UUID.fullmatch(instance) is not None


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    builtin = Draft202012Validator.FORMAT_CHECKER.checkers
    for name in ("date", "ipv4", "ipv6"):
        func, raises = builtin[name]
        checker.checks(name, raises)(func)
    checker.checks("email")(_is_email)
    checker.checks("uuid")(_is_uuid)
    return checker


_REFUSED = {
    "$dynamicRef": "dynamic references are not supported",
    "$dynamicAnchor": "dynamic references are not supported",
    "$recursiveRef": "recursive references (draft 2019-09) are not supported",
    "$recursiveAnchor": "recursive references (draft 2019-09) are not supported",
    "contentMediaType": "an annotation only in draft 2020-12: it would not be enforced",
    "contentEncoding": "an annotation only in draft 2020-12: it would not be enforced",
    "contentSchema": "an annotation only in draft 2020-12: it would not be enforced",
    "$vocabulary": "custom vocabularies are not supported",
}
_DRAFT_2020_12 = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    }
)
# Keywords whose value is a map of names to schemas (walked as schemas, names are not keywords).
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_VALUES = frozenset(
    {
        "items",
        "additionalProperties",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)


def json_pointer(root: Any, ref: str) -> Any:
    """What the local reference ``#/a/b`` (or ``#``) names in ``root``, or None."""
    node = root
    for raw in ref[2:].split("/") if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _resolves(root: Any, ref: str) -> bool:
    if not ref.startswith("#/"):
        return True  # "#" or an anchor: the validator resolves it (or fails at load)
    return json_pointer(root, ref) is not None


def _problem(key: str, value: Any, root: bool, doc: Any) -> str | None:
    """Why keyword ``key`` with ``value`` cannot be honoured, or None."""
    if key in _REFUSED:
        return _REFUSED[key]
    if key == "$ref":
        if not (isinstance(value, str) and value.startswith("#")):
            return "only local references (#/$defs/...) are supported"
        if not _resolves(doc, value):
            return "names nothing in this schema"
    if key == "$id" and not root:
        return "$id is only supported at the root of the action schema"
    if key == "format" and value not in ASSERTED_FORMATS:
        return f"cannot be asserted (asserted: {', '.join(sorted(ASSERTED_FORMATS))})"
    if key == "$schema" and value not in _DRAFT_2020_12:
        return "only draft 2020-12 is supported"
    if key == "enum" and value == []:
        return "an enum needs at least one value"
    return None


def _subschemas(key: str, value: Any, where: str) -> Iterator[tuple[str, Any]]:
    """The subschemas under keyword ``key``, with their paths."""
    if key in _SCHEMA_MAPS and isinstance(value, Mapping):
        for name, sub in value.items():
            yield f"{where}.{name}", sub
    elif key in _SCHEMA_LISTS and isinstance(value, list):
        for i, sub in enumerate(value):
            yield f"{where}[{i}]", sub
    elif key in _SCHEMA_VALUES:
        yield where, value


def _audit(schema: Any, path: str, root: bool, doc: Any = None) -> Iterator[tuple[str, Any, str]]:
    """(path, value, problem) for each construct that cannot be honoured."""
    doc = schema if doc is None else doc
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        yield path, schema, "a schema must be an object or a boolean"
        return
    for key, value in schema.items():
        where = f"{path}.{key}"
        problem = _problem(key, value, root, doc)
        if problem is not None:
            yield where, value, problem
        for sub_path, sub in _subschemas(key, value, where):
            yield from _audit(sub, sub_path, False, doc)


class ActionValidator:
    """Draft 2020-12 validation of one action schema, with the asserted formats checked.

    Args:
        schema: the action's JSON Schema as the user wrote it (``$defs`` and all).
        where: the path errors name (``action``).

    """

    __slots__ = ("_validator",)

    def __init__(self, schema: Mapping[str, Any], *, where: str = "action") -> None:
        for path, value, problem in _audit(schema, where, True):
            raise SchemaError(path, value, problem)
        body = dict(schema)
        try:
            Draft202012Validator.check_schema(body)
        except jsonschema.SchemaError as exc:
            at = ".".join(str(p) for p in exc.absolute_path)
            raise SchemaError(f"{where}.{at}" if at else where, exc.instance, exc.message) from None
        self._validator = Draft202012Validator(body, format_checker=_format_checker())

    def problem(self, instance: Any) -> str | None:
        """None when ``instance`` is valid, else the most relevant error as ``path: message``."""
        error = best_match(self._validator.iter_errors(instance))
        if error is None:
            return None
        at = ".".join(str(p) for p in error.absolute_path)
        return f"{at}: {error.message}" if at else error.message

    def is_valid(self, instance: Any) -> bool:
        """Whether ``instance`` is valid."""
        return bool(self._validator.is_valid(instance))
