"""rmw_zenoh's wire format: key expressions, liveliness tokens, QoS strings, attachments.

What a ROS 2 node on rmw_zenoh (ROS 2's Zenoh middleware) puts on Zenoh, as its design
document describes it (golden values in tests/unit/test_ros2_wire.py):

* a topic is the key ``<domain>/<name without outer slashes>/<DDS type>/<RIHS01 hash>``:
  another type or another definition of it is another key, so it never arrives;
* each node, subscription and publisher declares a liveliness token under ``@ros2_lv`` (its
  domain, the session's id, node and entity ids, kind ``NN``/``MS``/``MP``, enclave, namespace,
  node name; an endpoint adds its mangled topic, type, hash and QoS), which is how ``ros2 node
  list`` and ``ros2 topic info`` see it; ``/`` in a name becomes ``%``, an empty one is ``%``;
* every published sample carries a 33-byte attachment: sequence number and source timestamp
  (int64, little-endian), a length byte (16) and the publisher's GID. rmw_zenoh drops a sample
  without one.

rmw_zenoh derives a GID from the XXH3-128 hash of the entity's token; peers read it from the
attachment as an opaque id, so ours is the first 16 bytes of the token's SHA-256 (unique per
token, no extra dependency).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from forethought.policies import ConfigError

from ._ros2_types import dds_type_name

__all__ = [
    "ATTACHMENT_BYTES",
    "Attachment",
    "Qos",
    "endpoint_token",
    "entity_gid",
    "mangle",
    "node_token",
    "topic_key",
]

ADMIN_SPACE = "@ros2_lv"
ATTACHMENT_BYTES = 33
_ATTACHMENT = struct.Struct("<qqB16s")


def mangle(name: str) -> str:
    """A name inside a token: each ``/`` as ``%``; empty (or ``/``) is ``%``."""
    return "%" if name in ("", "/") else name.replace("/", "%")


def _validate_topic(topic: str) -> None:
    if not topic.startswith("/") or "//" in topic or topic.endswith("/") or " " in topic:
        raise ConfigError("topic", topic, "a ROS 2 topic looks like /front/range")
    if any(c in topic for c in "*$?#"):
        raise ConfigError("topic", topic, "a ROS 2 topic has no * $ ? or #")


def topic_key(domain_id: int, topic: str, type_name: str, type_hash: str) -> str:
    """The Zenoh key of ``topic`` carrying ``type_name`` (``sensor_msgs/msg/Range``)."""
    _validate_topic(topic)
    return f"{domain_id}/{topic.strip('/')}/{dds_type_name(type_name)}/{type_hash}"


@dataclass(frozen=True, slots=True)
class Qos:
    """A topic's QoS as rmw_zenoh's token writes it; defaults are written as empty fields.

    Defaults: reliable, volatile, keep last (the depth is always written), infinite deadline
    and lifespan, automatic liveliness with an infinite lease.
    """

    depth: int = 10
    reliable: bool = True
    transient_local: bool = False

    def encode(self) -> str:
        """``<rel>:<dur>:<hist>,<depth>:<deadline s,ns>:<lifespan s,ns>:<liv,lease s,ns>``."""
        rel = "" if self.reliable else "2"
        dur = "1" if self.transient_local else ""
        return f"{rel}:{dur}:,{self.depth}:,:,:,,"


def node_token(domain_id: int, zid: str, node_id: int, namespace: str, node: str) -> str:
    """The ``NN`` liveliness token of a node (no SROS enclave)."""
    return f"{ADMIN_SPACE}/{domain_id}/{zid}/{node_id}/{node_id}/NN/%/{mangle(namespace)}/{node}"


def endpoint_token(
    kind: str,
    domain_id: int,
    zid: str,
    node_id: int,
    entity_id: int,
    namespace: str,
    node: str,
    topic: str,
    type_name: str,
    type_hash: str,
    qos: Qos,
) -> str:
    """The liveliness token of a subscription (``MS``) or a publisher (``MP``)."""
    if kind not in ("MS", "MP"):
        raise ConfigError("kind", kind, "MS (subscription) or MP (publisher)")
    _validate_topic(topic)
    return (
        f"{ADMIN_SPACE}/{domain_id}/{zid}/{node_id}/{entity_id}/{kind}/%/{mangle(namespace)}/"
        f"{node}/{mangle(topic)}/{dds_type_name(type_name)}/{type_hash}/{qos.encode()}"
    )


def entity_gid(token: str) -> bytes:
    """A 16-byte GID for the entity whose liveliness token is ``token``."""
    return hashlib.sha256(token.encode()).digest()[:16]


@dataclass(frozen=True, slots=True)
class Attachment:
    """The attachment of every rmw_zenoh sample: who sent it, which one, when."""

    sequence: int
    timestamp_ns: int
    gid: bytes

    def encode(self) -> bytes:
        """The 33 bytes on the wire."""
        return _ATTACHMENT.pack(self.sequence, self.timestamp_ns, len(self.gid), self.gid)

    @classmethod
    def decode(cls, raw: bytes | None) -> Attachment:
        """Read 33 bytes; ValueError says what is wrong (missing, short, wrong GID length)."""
        if raw is None:
            raise ValueError("no attachment (rmw_zenoh samples carry one)")
        if len(raw) != ATTACHMENT_BYTES:
            raise ValueError(f"attachment of {len(raw)} bytes, not {ATTACHMENT_BYTES}")
        sequence, timestamp, length, gid = _ATTACHMENT.unpack(raw)
        if length != 16:
            raise ValueError(f"attachment GID length {length}, not 16")
        return cls(sequence, timestamp, gid)
