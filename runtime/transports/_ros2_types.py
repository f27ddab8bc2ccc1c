"""ROS 2 message types without ROS: CDR in and out, RIHS01 type hashes, field paths.

:class:`Ros2Types` holds the standard interfaces of ROS 2 Jazzy (rosbags' typestore, 162
types) and any custom types given as ``.msg`` text -- one definition, or a ``ros2msg`` schema
as rosbag2 writes it into an MCAP (the type, then ``MSG: pkg/msg/Dep`` sections after lines of
``=``). It decodes a CDR payload (with its 4-byte encapsulation header) into plain Python values
(dicts, lists, numbers, strings), encodes such values back, and computes each type's RIHS01 hash
(REP 2011) -- the hash rmw_zenoh puts in every key expression and rosbag2 stores as
``topic_type_hash``.

Why our own hash and not rosbags' ``hash_rihs01``: in a ``.msg`` file ``char`` is an alias of
``uint8`` for ROS (rosidl maps it so before hashing), but rosbags hashes it as the IDL ``char``
(type id 13) and gets a hash no ROS 2 node has. We map ``char`` to ``uint8`` as the ``.msg`` text
is read, so CDR, hash and field kinds agree with ROS. The hash is SHA-256 over the JSON of the
type description (fields with type id, capacity, string capacity and nested type name; no
default values) and the referenced types sorted by name, with Python's default separators.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forethought.policies import ConfigError

__all__ = ["FieldPath", "Ros2TypeError", "Ros2Types", "dds_type_name", "parse_path"]

# REP 2011's field type ids (rosidl's type_description_interfaces/msg/FieldType).
_TYPE_IDS = {
    "nested": 1,
    "int8": 2,
    "uint8": 3,
    "int16": 4,
    "uint16": 5,
    "int32": 6,
    "uint32": 7,
    "int64": 8,
    "uint64": 9,
    "float32": 10,
    "float64": 11,
    "float128": 12,
    "char": 13,
    "bool": 15,
    "byte": 16,
    "string": 17,
    "bounded_string": 21,
}
_ARRAY, _BOUNDED_SEQUENCE, _SEQUENCE = 48, 96, 144
# rosbags' node kinds (rosbags.typesys.base.Nodetype): base, name, array, sequence.
_BASE, _NAME, _ARRAY_NODE, _SEQUENCE_NODE = 1, 2, 3, 4
_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "byte": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}
_FLOATS = {"float32", "float64", "float128"}
_EMPTY_PLACEHOLDER = "structure_needs_at_least_one_member"
_PATH_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)")

FieldPath = tuple[str | int, ...]
"""A parsed field path: names and list indices (``a.b[0]`` is ``("a", "b", 0)``)."""


class Ros2TypeError(ValueError):
    """A payload that does not decode as its type, or a value that does not encode as it."""


def parse_path(text: str) -> FieldPath:
    """``"a.b[0].c"`` as ``("a", "b", 0, "c")``; raises ConfigError on a malformed path."""
    out: list[str | int] = []
    for part in text.split("."):
        m = _PATH_PART.fullmatch(part)
        if m is None:
            raise ConfigError("field path", text, "write names and indices: a.b, a[0], a.b[2].c")
        out.append(m.group(1))
        out.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return tuple(out)


def dds_type_name(name: str) -> str:
    """``sensor_msgs/msg/Range`` as DDS spells it: ``sensor_msgs::msg::dds_::Range_``."""
    pkg, kind, short = _split(name)
    return f"{pkg}::{kind}::dds_::{short}_"


def _split(name: str) -> tuple[str, str, str]:
    parts = name.split("/")
    if len(parts) != 3 or not all(parts):
        raise ConfigError("type", name, "a ROS 2 type looks like sensor_msgs/msg/Range")
    return parts[0], parts[1], parts[2]


@dataclass(frozen=True, slots=True)
class _Kind:
    """What a field path leads to: a base type name, or a nested message type."""

    base: str | None
    nested: str | None
    sequence: bool


class Ros2Types:
    """The message types one agent knows: ROS 2 Jazzy's, plus custom ``.msg`` definitions.

    ``standard=False``: only the definitions given (a recording's own schemas).
    """

    def __init__(
        self, msg_definitions: Mapping[str, str] | None = None, *, standard: bool = True
    ) -> None:
        try:
            from rosbags.typesys import Stores, get_typestore  # noqa: PLC0415
        except ImportError:
            raise ConfigError(
                "ros2", None, "not installed: pip install 'forethought[ros2]'"
            ) from None
        # standard=False: only the given definitions (a recording's own, say)
        self._store = get_typestore(Stores.ROS2_JAZZY if standard else Stores.EMPTY)
        self._hashes: dict[str, str] = {}
        for name, text in (msg_definitions or {}).items():
            self.add_msg(name, text)

    # -- definitions --------------------------------------------------------------------------

    def has(self, name: str) -> bool:
        """Whether ``name`` is known."""
        return name in self._store.fielddefs

    def add_msg(self, name: str, text: str) -> None:
        """Define ``name`` from ``.msg`` text, or from a ``ros2msg`` schema with its dependencies.

        A type that is already known is kept (the standard ones cannot be redefined).
        """
        from rosbags.typesys import get_types_from_msg  # noqa: PLC0415

        _split(name)
        found: dict[str, Any] = {}
        for typename, body in _sections(name, text):
            if self.has(typename):
                continue
            try:
                defs = get_types_from_msg(body, typename)
            except Exception as exc:  # rosbags' parser errors carry the position
                raise ConfigError(
                    f"msg {typename}", body[:80], f"not valid .msg text: {exc}"
                ) from None
            found.update({_unmangled(k): _as_rosidl(v) for k, v in defs.items()})
        for typename, (_, fields) in found.items():
            for fname, desc in fields:
                sub = _kind(desc).nested
                if sub is not None and sub not in found and not self.has(sub):
                    raise ConfigError(
                        f"msg {typename}.{fname}", sub, "an unknown type: give its .msg text too"
                    )
        if found:
            try:
                self._store.register(found)
            except Exception as exc:
                raise ConfigError(f"msg {name}", sorted(found), f"cannot register: {exc}") from None
        if not self.has(name):
            raise ConfigError(f"msg {name}", text[:80], "the text does not define this type")

    def _require(self, name: str) -> tuple[list[Any], list[Any]]:
        fielddef = self._store.fielddefs.get(name)
        if fielddef is None:
            raise ConfigError(
                "type", name, "unknown message type: give its .msg text in the map's msg block"
            )
        return fielddef

    def msgdef(self, name: str) -> str:
        """The type as a ``ros2msg`` schema: its ``.msg`` text, then each nested type's."""
        self._require(name)
        text, _ = self._store.generate_msgdef(name, ros_version=2)
        return str(text)

    # -- hashes -------------------------------------------------------------------------------

    def rihs01(self, name: str) -> str:
        """The type's RIHS01 hash: ``RIHS01_`` and 64 hex digits."""
        cached = self._hashes.get(name)
        if cached is not None:
            return cached
        described: dict[str, dict[str, Any]] = {}
        self._describe(name, described)
        doc = {
            "type_description": described[name],
            "referenced_type_descriptions": [described[k] for k in sorted(described) if k != name],
        }
        digest = hashlib.sha256(json.dumps(doc).encode()).hexdigest()
        self._hashes[name] = out = f"RIHS01_{digest}"
        return out

    def _describe(self, name: str, out: dict[str, dict[str, Any]]) -> None:
        if name in out:
            return
        empty = [(_EMPTY_PLACEHOLDER, (_BASE, ("uint8", 0)))]
        fields = self._require(name)[1] or empty
        described = []
        nested: list[str] = []
        for fname, desc in fields:
            offset, capacity, node = 0, 0, desc  # node: rosbags' (kind, detail) pair
            sub: str = ""
            if desc[0] == _ARRAY_NODE:
                offset, capacity, node = _ARRAY, desc[1][1], desc[1][0]
            elif desc[0] == _SEQUENCE_NODE:
                capacity, node = desc[1][1], desc[1][0]
                offset = _BOUNDED_SEQUENCE if capacity else _SEQUENCE
            string_capacity = 0
            if node[0] == _NAME:
                type_id, sub = _TYPE_IDS["nested"], str(node[1])
                nested.append(sub)
            elif node[1][0] == "string" and node[1][1]:
                type_id, string_capacity = _TYPE_IDS["bounded_string"], node[1][1]
            else:
                # char is uint8 to ROS (rosidl): also in the Jazzy store (ServiceEventInfo's
                # client_gid), where rosbags keeps the IDL char
                type_id = _TYPE_IDS["uint8" if node[1][0] == "char" else node[1][0]]
            described.append(
                {
                    "name": fname,
                    "type": {
                        "type_id": offset + type_id,
                        "capacity": capacity,
                        "string_capacity": string_capacity,
                        "nested_type_name": sub,
                    },
                }
            )
        out[name] = {"type_name": name, "fields": described}
        for sub in nested:
            self._describe(sub, out)

    # -- field paths --------------------------------------------------------------------------

    def check_path(self, name: str, path: str) -> str | None:
        """Why ``path`` does not lead to a value in a ``name`` message (None: it does)."""
        try:
            parts = parse_path(path)
        except ConfigError as exc:
            return exc.problem
        kind = _Kind(None, name, sequence=False)
        for part in parts:
            if isinstance(part, int):
                if not kind.sequence:
                    return f"{path}: not a list before [{part}]"
                kind = _Kind(kind.base, kind.nested, sequence=False)
                continue
            if kind.sequence or kind.nested is None:
                return f"{path}: {part!r} follows a value that has no fields"
            fields = dict(self._require(kind.nested)[1])
            if part not in fields:
                return f"{path}: {kind.nested} has no field {part!r} (it has {sorted(fields)})"
            kind = _kind(fields[part])
        return None

    # -- CDR ----------------------------------------------------------------------------------

    def decode(self, name: str, raw: bytes) -> dict[str, Any]:
        """A CDR payload (with its encapsulation header) as plain values; Ros2TypeError if not."""
        self._require(name)
        if len(raw) < 4 or raw[0] != 0 or raw[1] not in (0, 1):
            raise Ros2TypeError(f"{name}: not a CDR payload (header {raw[:4].hex() or 'empty'})")
        try:
            msg = self._store.deserialize_cdr(raw, name)
        except Exception as exc:  # truncated or garbled: rosbags raises several kinds
            raise Ros2TypeError(f"{name}: the payload does not decode ({exc})") from None
        out = self._plain(name, msg)
        assert isinstance(out, dict)
        return out

    def _plain(self, name: str, msg: Any) -> Any:
        # an empty message's one padding byte is no field of it (rosidl adds it, ROS hides it)
        return {
            fname: self._plain_value(desc, getattr(msg, fname))
            for fname, desc in self._require(name)[1]
            if fname != _EMPTY_PLACEHOLDER
        }

    def _plain_value(self, desc: Any, value: Any) -> Any:
        if desc[0] == _NAME:
            return self._plain(desc[1], value)
        if desc[0] == _BASE:
            return value % 256 if desc[1][0] == "byte" else value  # rosbags reads byte signed
        inner = desc[1][0]
        if inner[0] == _NAME:
            return [self._plain(inner[1], v) for v in value]
        items = value.tolist() if hasattr(value, "tolist") else list(value)
        return [v % 256 for v in items] if inner[1][0] == "byte" else items

    def encode(self, name: str, value: Mapping[str, Any]) -> bytes:
        """``value`` (missing fields are zero/empty) as CDR, little-endian, with its header.

        Raises Ros2TypeError naming the field when a value does not fit its field: nothing is
        encoded in part.
        """
        msg = self._build(name, value, name)
        try:
            return bytes(self._store.serialize_cdr(msg, name))
        except Exception as exc:
            raise Ros2TypeError(f"{name}: cannot encode ({exc})") from None

    def _build(self, name: str, value: Any, where: str) -> Any:
        if not isinstance(value, Mapping):
            raise Ros2TypeError(f"{where}: expected an object for {name}, got {value!r:.60}")
        fields = self._require(name)[1]
        unknown = set(value) - {f for f, _ in fields}
        if unknown:
            raise Ros2TypeError(f"{where}: {name} has no field {sorted(unknown)[0]!r}")
        kwargs = {
            fname: self._build_value(desc, value.get(fname), f"{where}.{fname}")
            for fname, desc in fields
        }
        return self._store.types[name](**kwargs)

    def _build_value(self, desc: Any, value: Any, where: str) -> Any:
        import numpy as np  # noqa: PLC0415 - rosbags' dependency, needed only here

        if desc[0] == _NAME:
            return self._build(desc[1], {} if value is None else value, where)
        if desc[0] == _BASE:
            return _scalar(desc[1], value, where)
        inner, size = desc[1]
        items = [] if value is None else value
        if not isinstance(items, list | tuple):
            raise Ros2TypeError(f"{where}: expected a list, got {value!r:.60}")
        if desc[0] == _ARRAY_NODE and value is None:
            items = [None] * size
        if desc[0] == _ARRAY_NODE and len(items) != size:
            raise Ros2TypeError(f"{where}: expected {size} items, got {len(items)}")
        if desc[0] == _SEQUENCE_NODE and size and len(items) > size:
            raise Ros2TypeError(f"{where}: at most {size} items, got {len(items)}")
        built = [self._build_value(inner, v, f"{where}[{i}]") for i, v in enumerate(items)]
        base = inner[1][0] if inner[0] == _BASE else None
        if base in _INTS or base in _FLOATS or base == "bool":
            dtype = {"byte": "uint8", "float128": "float64"}.get(base or "", base)
            return np.array(built, dtype=dtype)
        return built


def _scalar(base: tuple[str, int], value: Any, where: str) -> Any:
    kind, bound = base
    if kind == "string":
        text = "" if value is None else value
        if not isinstance(text, str):
            raise Ros2TypeError(f"{where}: expected a string, got {value!r:.60}")
        if bound and len(text.encode()) > bound:
            raise Ros2TypeError(f"{where}: longer than {bound} bytes")
        return text
    if kind == "bool":
        if value is None:
            return False
        if not isinstance(value, bool):
            raise Ros2TypeError(f"{where}: expected true or false, got {value!r:.60}")
        return value
    if kind in _FLOATS:
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Ros2TypeError(f"{where}: expected a number, got {value!r:.60}")
        return float(value)
    low, high = _INTS[kind]
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise Ros2TypeError(f"{where}: expected an integer ({kind}), got {value!r:.60}")
    if not low <= value <= high:
        raise Ros2TypeError(f"{where}: {value} is out of {kind}'s range {low}..{high}")
    return value


def _kind(desc: Any) -> _Kind:
    if desc[0] in (_ARRAY_NODE, _SEQUENCE_NODE):
        inner = _kind(desc[1][0])
        return _Kind(inner.base, inner.nested, sequence=True)
    if desc[0] == _NAME:
        return _Kind(None, desc[1], sequence=False)
    return _Kind(desc[1][0], None, sequence=False)


def _unmangled(name: str) -> str:
    """The rosbags parser names ``pkg/srv/T`` as ``pkg/srv/msg/T``: back to ROS's name."""
    parts = name.split("/")
    return "/".join((*parts[:2], parts[3])) if len(parts) == 4 and parts[2] == "msg" else name


def _as_rosidl(fielddef: Any) -> Any:
    """A parsed ``.msg`` definition as rosidl reads it: ``char`` is ``uint8``, names unmangled."""

    def fix(node: Any) -> Any:
        if node[0] == _BASE and node[1][0] == "char":
            return (_BASE, ("uint8", node[1][1]))
        if node[0] == _NAME:
            return (_NAME, _unmangled(node[1]))
        if node[0] in (_ARRAY_NODE, _SEQUENCE_NODE):
            return (node[0], (fix(node[1][0]), node[1][1]))
        return node

    consts, fields = fielddef
    consts = [(n, "uint8" if t == "char" else t, v) for n, t, v in consts]
    return (consts, [(n, fix(d)) for n, d in fields])


def _sections(name: str, text: str) -> list[tuple[str, str]]:
    """A ``ros2msg`` schema's definitions: the named type's, then each ``MSG: pkg/Type``'s."""
    out: list[tuple[str, str]] = []
    current, lines = name, list[str]()
    for line in text.splitlines():
        if re.fullmatch(r"=+\s*", line) and len(line.strip()) >= 3:
            out.append((current, "\n".join(lines)))
            current, lines = "", []
            continue
        if not current and line.startswith("MSG: "):
            current = _full_name(line[5:].strip())
            continue
        lines.append(line)
    if current:
        out.append((current, "\n".join(lines)))
    # dependencies first, so each type's nested names are known when it is registered
    return out[1:][::-1] + out[:1]


def _full_name(name: str) -> str:
    """``pkg/Type`` (how ``MSG:`` lines name types) as ``pkg/msg/Type``."""
    parts = name.split("/")
    return f"{parts[0]}/msg/{parts[1]}" if len(parts) == 2 else name
