"""Action schemas: readable for callers, compact on the wire the model writes.

An :class:`ActionSchema` wraps a pydantic model (or a JSON Schema turned into one) and derives a
*compact* JSON Schema from it: every property gets a short alias (declared, or derived), titles
and descriptions go, and the model is asked to write that form only. Output tokens are what an
action costs (T = prefill + N_out x t_step), so the compact form is a latency optimisation, not
cosmetics. Callers never see compact keys: :meth:`ActionSchema.parse` maps them back and
validates against the readable model.
"""

from __future__ import annotations

import enum
import hashlib
import itertools
import keyword
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ._errors import InvalidAction, SchemaError
from ._validator import ActionValidator, json_pointer

__all__ = ["ActionForm", "ActionSchema"]

_JSON = dict[str, Any]
_DROP_KEYS = frozenset({"title", "description", "examples", "default", "$comment"})
_REASON_FIELD = "reason"


class ActionForm(enum.Enum):
    """Which form of an action the model writes."""

    COMPACT = "compact"
    """Short keys, enum values, no prose: what Forethought generates."""
    VERBOSE = "verbose"
    """Readable keys plus a one-sentence ``reason``, as models write unprompted (for contrast)."""


class _Node:
    """One object level of the schema: readable name <-> compact alias, and the child nodes."""

    __slots__ = ("children", "input_keys", "to_compact", "to_readable")

    def __init__(self) -> None:
        self.to_compact: dict[str, str] = {}
        self.to_readable: dict[str, str] = {}
        self.input_keys: dict[str, str] = {}  # readable name -> key the pydantic model accepts
        self.children: dict[str, _Node] = {}


def _split_words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced) if w]


def _alias_candidates(name: str) -> Iterator[str]:
    words = _split_words(name) or [name]
    yield words[0][0].lower()
    yield "".join(w[0] for w in words).lower()
    flat = "".join(words).lower()
    for n in range(2, len(flat) + 1):
        yield flat[:n]
    for i in itertools.count(2):
        yield f"{flat[:1]}{i}"


def derive_aliases(
    names: Sequence[str], declared: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Give each name a short, unique alias; declared aliases win and are reserved first."""
    declared = dict(declared or {})
    taken = set(declared.values())
    if len(taken) != len(declared):
        raise SchemaError("aliases", declared, "two fields declare the same compact alias")
    out: dict[str, str] = {}
    for name in names:
        if name in declared:
            out[name] = declared[name]
            continue
        alias = next(c for c in _alias_candidates(name) if c not in taken)
        taken.add(alias)
        out[name] = alias
    return out


def _inline_refs(schema: Any, root: Any, seen: tuple[str, ...] = ()) -> Any:
    """``schema`` with local ``$ref`` pointers replaced by what they name, for the grammar.

    What cannot be inlined -- a recursive reference, an anchor -- becomes ``{}`` (anything):
    the grammar is relaxed there and the validator of record enforces the schema.
    """
    if isinstance(schema, dict):
        out = {k: v for k, v in schema.items() if k not in ("$defs", "definitions")}
        ref = out.pop("$ref", None)
        body = {k: _inline_refs(v, root, seen) for k, v in out.items()}
        if ref is None:
            return body
        target = json_pointer(root, ref) if str(ref).startswith("#/") or ref == "#" else None
        if target is None or ref in seen or isinstance(target, bool):
            return body  # relaxed: the validator checks the reference
        resolved = _inline_refs(target, root, (*seen, ref))
        return {**resolved, **body} if isinstance(resolved, dict) else body
    if isinstance(schema, list):
        return [_inline_refs(v, root, seen) for v in schema]
    return schema


def _is_object(schema: Any) -> bool:
    """A closed object level: its keys get compact aliases.

    An open object (extra properties allowed) keeps its keys as they are: an extra key could
    collide with an alias, and an alias must never change what validates.
    """
    return isinstance(schema, Mapping) and (
        schema.get("type") == "object"
        and isinstance(schema.get("properties"), Mapping)
        and schema.get("additionalProperties") is False
    )


def _nodes(schema: Mapping[str, Any], path: str, node: _Node) -> list[str]:
    """Fill ``node`` (aliases, nested object levels) for an object schema; returns required."""
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props:
        raise SchemaError(f"{path}.properties", props, "an action object needs properties")
    required = list(schema.get("required", []))
    unknown = sorted(set(required) - set(props))
    if unknown:
        # JSON Schema allows it, but the action could never be written: we emit declared
        # properties only.
        raise SchemaError(f"{path}.required", unknown, "names no declared property")
    declared = {
        k: str(v["x-compact"])
        for k, v in props.items()
        if isinstance(v, Mapping) and "x-compact" in v
    }
    aliases = derive_aliases(list(props), declared)
    for name, sub in props.items():
        node.input_keys[name] = name
        node.to_compact[name] = aliases[name]
        node.to_readable[aliases[name]] = name
        if _is_object(sub):
            child = _Node()
            _nodes(sub, f"{path}.properties.{name}", child)
            node.children[name] = child
    return required


def _container_model(
    schema: Mapping[str, Any], path: str, node: _Node, name: str
) -> type[BaseModel]:
    """A pydantic container for a JSON-Schema action: named fields, any values.

    It carries the action through the runtime; what is valid is decided by the validator of
    record (:class:`ActionValidator`), not by pydantic, whose types differ from JSON Schema's
    (``True == 1``, ``1.0`` is not an ``int``, no ``multipleOf``...).
    """
    if schema.get("type") != "object":
        raise SchemaError(f"{path}.type", schema.get("type"), "an action must be a JSON object")
    required = set(_nodes(schema, path, node))
    fields: dict[str, Any] = {}
    for prop in schema["properties"]:
        ident = (
            prop if prop.isidentifier() and not keyword.iskeyword(prop) else f"field_{len(fields)}"
        )
        if ident.startswith("_") or ident in dir(BaseModel):
            ident = f"field_{len(fields)}"
        default = ... if prop in required else None
        fields[ident] = (Any, Field(default, alias=prop))
    config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    return create_model(name, __config__=config, **fields)


_GRAMMAR_KEYS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "const",
        "anyOf",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
    }
)


def _grammar_schema(schema: Any) -> Any:
    """The part of a (compact) schema the grammars enforce; the validator checks the rest.

    ``oneOf`` becomes ``anyOf`` (exactly-one is checked afterwards), a type list becomes an
    ``anyOf`` of its types, boolean schemas become ``{}``, and keywords outside
    :data:`_GRAMMAR_KEYS` (``not``, ``if``/``then``/``else``, ``multipleOf``, ``uniqueItems``,
    ``allOf``, ``min/maxProperties``, ``dependentRequired``, ``format``...) are dropped.
    """
    if isinstance(schema, bool):
        return {}
    if isinstance(schema, list):
        return [_grammar_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: _JSON = {}
    for key, value in schema.items():
        if key == "oneOf":
            out["anyOf"] = _grammar_schema(value)
        elif key == "properties":
            out[key] = {k: _grammar_schema(v) for k, v in value.items()}
        elif key in ("anyOf", "prefixItems") or (
            key in ("items", "additionalProperties") and not isinstance(value, bool)
        ):
            out[key] = _grammar_schema(value)
        elif key in _GRAMMAR_KEYS:
            out[key] = value
    kinds = out.get("type")
    if isinstance(kinds, list):
        rest = {k: v for k, v in out.items() if k != "type"}
        out = {"anyOf": [{**rest, "type": k} for k in kinds]}
    return out


def _compact_schema(schema: Any, node: _Node | None) -> Any:
    """Strip prose and rename properties to their compact aliases, recursively."""
    if isinstance(schema, list):
        return [_compact_schema(s, node) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: _JSON = {}
    for key, value in schema.items():
        if key in _DROP_KEYS or key.startswith("x-"):
            continue
        if key == "properties" and node is not None:
            out[key] = {
                node.to_compact[name]: _compact_schema(sub, node.children.get(name))
                for name, sub in value.items()
            }
        elif key == "required" and node is not None:
            out[key] = [node.to_compact[n] for n in value]
        else:
            out[key] = _compact_schema(value, node if key in ("anyOf", "oneOf", "items") else None)
    if out.get("type") == "object":
        out["additionalProperties"] = False
    return out


def _rename(data: Any, node: _Node | None, mapping: str) -> Any:
    if node is None or not isinstance(data, dict):
        return data
    table: dict[str, str] = getattr(node, mapping)
    out = {}
    for key, value in data.items():
        new = table.get(key)
        if new is None:
            raise KeyError(key)
        readable = new if mapping == "to_readable" else key
        out[new] = _rename(value, node.children.get(readable), mapping)
    return out


def _declare_aliases(schema: Any, node: _Node | None) -> Any:
    if not isinstance(schema, dict) or node is None:
        return schema
    props = schema.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            if isinstance(sub, dict) and name in node.to_compact:
                sub["x-compact"] = node.to_compact[name]
                _declare_aliases(sub, node.children.get(name))
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key, []):
            _declare_aliases(option, node)
    return schema


class ActionSchema:
    """A validated action type with its compact wire form.

    Build one with :meth:`from_model` (a pydantic model; ``Field(alias=...)`` declares compact
    names) or :meth:`from_json_schema` (``x-compact`` declares them). Undeclared aliases are
    derived: the first letter, the initials, then longer prefixes, unique per object.
    """

    __slots__ = (
        "_compact",
        "_fingerprint",
        "_model",
        "_node",
        "_original",
        "_readable",
        "_strict",
        "_validator",
    )

    def __init__(
        self,
        *,
        model: type[BaseModel],
        readable_schema: _JSON,
        node: _Node,
        strict: bool,
        validator: ActionValidator | None = None,
        original: _JSON | None = None,
    ) -> None:
        self._model = model
        self._readable = readable_schema
        self._node = node
        self._strict = strict
        self._validator = validator
        self._original = original if original is not None else readable_schema
        self._compact: _JSON = _compact_schema(readable_schema, node)
        canon = orjson.dumps(
            [self._original, self._readable, self._compact], option=orjson.OPT_SORT_KEYS
        )
        self._fingerprint = hashlib.sha256(canon).hexdigest()[:16]

    @classmethod
    def from_json_schema(cls, schema: Mapping[str, Any], *, name: str = "Action") -> ActionSchema:
        """Build from a JSON Schema of type object, validated with draft 2020-12 semantics.

        Raises SchemaError naming the keyword and its path when the schema uses something that
        cannot be honoured (:mod:`._validator`).
        """
        if not isinstance(schema, Mapping):
            raise SchemaError("action", schema, "an action schema must be a JSON object")
        original = cast(_JSON, orjson.loads(orjson.dumps(dict(schema))))
        validator = ActionValidator(original)
        flat = _inline_refs(original, original)
        node = _Node()
        model = _container_model(flat, "action", node, name)
        return cls(
            model=model,
            readable_schema=flat,
            node=node,
            strict=True,
            validator=validator,
            original=original,
        )

    @classmethod
    def from_model(cls, model: type[BaseModel]) -> ActionSchema:
        """Build from a pydantic model; field aliases, when declared, become compact names."""
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise SchemaError("action", model, "expected a pydantic BaseModel subclass")
        raw = model.model_json_schema(by_alias=False)
        flat = _inline_refs(raw, raw)
        node = _Node()
        declared = {n: f.alias for n, f in model.model_fields.items() if f.alias and f.alias != n}
        props = list(flat.get("properties", {}))
        aliases = derive_aliases(props, declared)
        for n in props:
            node.to_compact[n] = aliases[n]
            node.to_readable[aliases[n]] = n
            node.input_keys[n] = model.model_fields[n].alias or n
        return cls(model=model, readable_schema=flat, node=node, strict=False)

    @property
    def model(self) -> type[BaseModel]:
        """The readable pydantic model callers receive."""
        return self._model

    @property
    def fingerprint(self) -> str:
        """A short hash identifying this schema (grammar caches and snapshots key on it)."""
        return self._fingerprint

    @property
    def aliases(self) -> dict[str, str]:
        """Top-level readable name -> compact alias."""
        return dict(self._node.to_compact)

    def portable(self) -> _JSON:
        """The readable JSON Schema with every compact alias declared (``x-compact``).

        ``ActionSchema.from_json_schema(schema.portable())`` rebuilds the same compact form in
        another process, whatever this schema was built from.
        """
        declared: _JSON = _declare_aliases(orjson.loads(orjson.dumps(self._readable)), self._node)
        return declared

    def original(self) -> _JSON:
        """The JSON Schema as given (a pydantic model's own schema for :meth:`from_model`)."""
        return cast(_JSON, orjson.loads(orjson.dumps(self._original)))

    def json_schema(self, form: ActionForm = ActionForm.COMPACT) -> _JSON:
        """The JSON Schema the model is constrained to for ``form``.

        What the grammars enforce (:func:`_grammar_schema`); every parsed action is then
        validated against the original schema, which decides.
        """
        if form is ActionForm.COMPACT:
            return cast(_JSON, _grammar_schema(self._compact))
        verbose = cast(_JSON, _grammar_schema(self._readable))
        verbose["properties"] = {
            **verbose["properties"],
            # One full sentence, as chat models explain themselves unprompted.
            _REASON_FIELD: {"type": "string", "minLength": 80, "maxLength": 160},
        }
        verbose["required"] = [*verbose.get("required", []), _REASON_FIELD]
        verbose["additionalProperties"] = False
        return verbose

    def parse(self, text: str | bytes, form: ActionForm = ActionForm.COMPACT) -> BaseModel:
        """Parse model output of ``form`` into the readable model, or raise InvalidAction."""
        raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InvalidAction(raw, f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidAction(raw, "not a JSON object")
        if form is ActionForm.VERBOSE:
            data.pop(_REASON_FIELD, None)
            return self.validate(data, raw=raw)
        try:
            readable = _rename(data, self._node, "to_readable")
        except KeyError as exc:
            raise InvalidAction(raw, f"unknown compact field {exc.args[0]!r}") from None
        return self.validate(readable, raw=raw)

    def validate(self, data: Mapping[str, Any] | BaseModel, *, raw: str | None = None) -> BaseModel:
        """Validate a readable action (a mapping or a model instance) or raise InvalidAction."""
        if isinstance(data, self._model):
            return data
        if isinstance(data, BaseModel):
            data = data.model_dump(by_alias=False, exclude_none=True)
        if not isinstance(data, Mapping):
            raise InvalidAction(repr(data), "an action must be a JSON object")
        if self._validator is not None:
            problem = self._validator.problem(dict(data))
            if problem is not None:
                text = raw if raw is not None else orjson.dumps(dict(data), default=str).decode()
                raise InvalidAction(text, problem)
        keyed = {self._node.input_keys.get(k, k): v for k, v in data.items()}
        try:
            return self._model.model_validate(keyed)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "action"
            text = raw if raw is not None else orjson.dumps(dict(data), default=str).decode()
            raise InvalidAction(text, f"{where}: {first['msg']}") from None

    def readable(self, action: BaseModel) -> _JSON:
        """The readable JSON object of a validated action (unset optional fields omitted)."""
        # Models built from a JSON Schema carry the readable names as aliases and keep an
        # explicit null (valid for a type list with "null"); user models carry their field
        # names (their aliases, if any, are the compact names).
        if self._strict:
            kept: _JSON = action.model_dump(mode="json", by_alias=True, exclude_unset=True)
            return kept
        dumped: _JSON = action.model_dump(mode="json", by_alias=False, exclude_none=True)
        return dumped

    def compact(self, action: BaseModel) -> str:
        """The compact JSON text of a validated action, exactly as the model would write it."""
        data = _rename(self.readable(action), self._node, "to_compact")
        return orjson.dumps(data).decode()

    def enumerate(self, limit: int) -> list[BaseModel] | None:
        """Every action when the space is finite and at most ``limit`` large, else None.

        Required fields must be enums, consts or booleans; optional fields are left unset.
        """
        props: Mapping[str, Any] = self._readable.get("properties", {})
        choices: list[list[tuple[str, Any]]] = []
        for name in self._readable.get("required", []):
            sub = props[name]
            if "enum" in sub:
                values = list(sub["enum"])
            elif "const" in sub:
                values = [sub["const"]]
            elif sub.get("type") == "boolean":
                values = [False, True]
            else:
                return None
            choices.append([(name, v) for v in values])
        total = 1
        for c in choices:
            total *= len(c)
        if total > limit:
            return None
        out = []
        for combo in itertools.product(*choices):
            try:  # a combination the schema forbids (not, if/then, oneOf...) is no candidate
                out.append(self.validate(dict(combo)))
            except InvalidAction:
                continue
        return out
