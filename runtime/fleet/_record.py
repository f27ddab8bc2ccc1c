"""A branch as the fleet's bucket stores it: a key-value-safe key and a self-describing value.

A bucket key may hold only ``[-/_=.A-Za-z0-9]``; a state fingerprint is hex and an event key is
any JSON, so the key is ``<fingerprint>.<event key as unpadded URL-safe base64>``: readable
enough to list a state's branches (``<fingerprint>.*``) and exactly reversible. The value is the
branch (the node's row, as tree snapshots write it) with the model that wrote it, the hash of
the prompt it was written from (the spec's description and action schema: a branch written for
another task or schema is refused on arrival), the writer, and the wall-clock time of writing.
"""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass
from typing import Any

import orjson

from forethought.policies import EventKey, PolicyNode

__all__ = ["BranchRecord", "branch_key", "decode_key", "prompt_hash"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def branch_key(fingerprint: str, key: EventKey) -> str:
    """The bucket key of the branch ``key`` in state ``fingerprint``."""
    event = orjson.dumps(key.as_json(), option=orjson.OPT_SORT_KEYS)
    return f"{_b64(fingerprint.encode())}.{_b64(event)}"


def decode_key(bucket_key: str) -> tuple[str, EventKey]:
    """Inverse of :func:`branch_key`; raises ValueError on a key it did not write."""
    fp, _, event = bucket_key.partition(".")
    if not event:
        raise ValueError(f"not a branch key: {bucket_key!r}")

    def unb64(text: str) -> bytes:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

    return unb64(fp).decode(), EventKey.from_json(orjson.loads(unb64(event)))


def prompt_hash(description: str, schema_fingerprint: str) -> str:
    """What a branch was written from: the task description and the action schema."""
    return hashlib.sha256(f"{schema_fingerprint}\n{description}".encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class BranchRecord:
    """One branch in the fleet's bucket."""

    node: PolicyNode
    prompt: str
    """:func:`prompt_hash` of what it was written from."""
    writer: str
    """The worker (or robot, for an offer) that wrote it."""
    written_at: float
    """Wall-clock seconds (``time.time``) when it was written: how old a branch is, and how
    long it took to reach each agent (the propagation benchmark)."""

    @property
    def key(self) -> str:
        """Its bucket key."""
        return branch_key(self.node.fingerprint, self.node.key)

    @classmethod
    def of(cls, node: PolicyNode, *, prompt: str, writer: str) -> BranchRecord:
        """A record of ``node`` written now."""
        return cls(node, prompt, writer, time.time())

    def encode(self) -> bytes:
        """The bucket value."""
        return orjson.dumps(
            {
                "branch": self.node.to_row(),
                "model": self.node.model_id,
                "prompt": self.prompt,
                "writer": self.writer,
                "written_at": self.written_at,
            }
        )

    @classmethod
    def decode(cls, value: bytes) -> BranchRecord:
        """Inverse of :meth:`encode`; raises ValueError on anything else."""
        try:
            data: dict[str, Any] = orjson.loads(value)
            node = PolicyNode.from_row(data["branch"])
            return cls(node, str(data["prompt"]), str(data["writer"]), float(data["written_at"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a branch record ({exc})") from None
