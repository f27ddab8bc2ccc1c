"""McapRecorder: what an agent saw and did, as an MCAP file Foxglove opens as it is.

Four JSON channels, each with a JSON Schema so viewers know the fields:

* ``/forethought/events`` -- every event (id, type, params, deadline);
* ``/forethought/decisions`` -- every decision (tier, latency, deadline met, the action);
* ``/forethought/state`` -- the state after each change;
* ``/forethought/planner`` -- planner figures (branches, coverage, busy time) over time.

Log times are nanoseconds on the recorder's time base (the wall clock for ``forethought run``,
the replay's own clock for ``forethought sim``). The file is written in small chunks straight to
the operating system (no buffer in this process): a process killed mid-run leaves a file that
reads back up to its last complete chunk (:func:`read_mcap_json` reads such a file).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Self, cast

import orjson

from forethought.policies import ConfigError, InputError

__all__ = ["CHANNELS", "McapMessage", "McapRecorder", "read_mcap_json"]

_OBJECT = {"type": "object"}
CHANNELS: dict[str, dict[str, Any]] = {
    "/forethought/events": {
        "title": "forethought.Event",
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "type": {"type": "string"},
            "params": _OBJECT,
            "deadline_ms": {"type": ["number", "null"]},
        },
    },
    "/forethought/decisions": {
        "title": "forethought.Decision",
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "tier": {"type": "string"},
            "latency_ms": {"type": "number"},
            "deadline_ms": {"type": ["number", "null"]},
            "met": {"type": "boolean"},
            "action": _OBJECT,
        },
    },
    "/forethought/state": {"title": "forethought.State", "type": "object"},
    "/forethought/planner": {
        "title": "forethought.Planner",
        "type": "object",
        "properties": {
            "branches": {"type": "integer"},
            "coverage": {"type": ["number", "null"]},
            "busy_s": {"type": "number"},
        },
    },
}


class McapRecorder:
    """Writes the four channels to ``path`` (``with`` it, or :meth:`open` and :meth:`close`).

    Args:
        path: the ``.mcap`` file to write (replaced if it exists).
        chunk_size: bytes per chunk: what a killed process can lose at most.
        clock_ns: the time base of log times (default: the wall clock).

    """

    def __init__(
        self,
        path: str | Path,
        *,
        chunk_size: int = 16_384,
        clock_ns: Any = time.time_ns,
    ) -> None:
        if chunk_size < 256:
            raise ConfigError("chunk_size", chunk_size, "must be at least 256 bytes")
        self.path = Path(path)
        self._chunk_size = chunk_size
        self._clock_ns = clock_ns
        self._file: BinaryIO | None = None
        self._writer: Any = None
        self._channels: dict[str, int] = {}
        self.messages = 0

    def open(self) -> Self:
        """Create the file and declare the channels."""
        try:
            from mcap.writer import CompressionType, Writer  # noqa: PLC0415 - forethought[mcap]
        except ImportError:
            raise ConfigError("record", str(self.path), "pip install 'forethought[mcap]'") from None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Unbuffered: each finished chunk goes to the OS at once, so a kill loses one chunk.
        self._file = open(self.path, "wb", buffering=0)  # noqa: SIM115
        writer = Writer(
            cast(Any, _Straight(self._file)),  # duck-typed: it needs write() and tell()
            chunk_size=self._chunk_size,
            compression=CompressionType.ZSTD,
        )
        writer.start(profile="", library="forethought")
        for topic, schema in CHANNELS.items():
            schema_id = writer.register_schema(
                name=schema["title"], encoding="jsonschema", data=orjson.dumps(schema)
            )
            self._channels[topic] = writer.register_channel(
                topic=topic, message_encoding="json", schema_id=schema_id
            )
        self._writer = writer
        return self

    def now_ns(self) -> int:
        """The recorder's clock, in nanoseconds."""
        return int(self._clock_ns())

    def write(self, topic: str, data: Mapping[str, Any] | bytes, log_ns: int | None = None) -> None:
        """One message on ``topic`` (a JSON object, or its bytes), at ``log_ns`` (default now)."""
        if self._writer is None:
            raise ConfigError("record", str(self.path), "the recorder is not open")
        channel = self._channels.get(topic)
        if channel is None:
            raise ConfigError("topic", topic, f"choose one of {sorted(self._channels)}")
        t = self.now_ns() if log_ns is None else int(log_ns)
        body = data if isinstance(data, bytes) else orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        self._writer.add_message(
            channel_id=channel, log_time=t, publish_time=t, data=body, sequence=self.messages
        )
        self.messages += 1

    def close(self) -> None:
        """Write the index and the summary, and close the file."""
        if self._writer is not None:
            self._writer.finish()
            self._writer = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Straight:
    """Writes straight to an unbuffered file.

    Not an ``io.RawIOBase``: given one, mcap's Writer wraps it in a BufferedWriter, which would
    hold up to 8 KiB that a killed process loses.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:  # a raw write may take only part
            n = self._raw.write(view)
            view = view[n or 0 :]
        return len(data)

    def tell(self) -> int:
        return self._raw.tell()

    def flush(self) -> None:
        """Nothing is held here."""


@dataclass(frozen=True, slots=True)
class McapMessage:
    """One JSON message read back."""

    topic: str
    log_ns: int
    data: bytes
    encoding: str
    """The channel's message encoding (``json``, ``cdr``...)."""

    def json(self) -> Any:
        """The message as JSON; InputError naming the topic when it is not JSON."""
        if self.encoding != "json":
            raise InputError(
                "channel", self.topic, f"its encoding is {self.encoding!r}; only JSON is decoded"
            )
        try:
            return orjson.loads(self.data)
        except orjson.JSONDecodeError as exc:
            raise InputError("channel", self.topic, f"a message is not JSON ({exc})") from None


def read_mcap_json(path: str | Path) -> Iterator[McapMessage]:
    """Every message of an MCAP file in file order, reading as far as the file is whole.

    A file cut short (a writer killed mid-run) yields everything up to its last complete
    chunk, then stops; a file that is not MCAP at all raises InputError.
    """
    from mcap.exceptions import McapError  # noqa: PLC0415
    from mcap.records import Channel, Message  # noqa: PLC0415
    from mcap.stream_reader import StreamReader  # noqa: PLC0415

    channels: dict[int, Channel] = {}
    with open(path, "rb") as fh:
        reader = StreamReader(fh, skip_magic=False)
        records = reader.records
        while True:
            try:
                record = next(records)
            except StopIteration:
                return
            except (McapError, EOFError, ValueError, OSError) as exc:
                if not channels:
                    raise InputError(
                        "mcap", str(path), f"not a readable MCAP file: {exc}"
                    ) from None
                return  # the end of what a killed writer left: the rest is lost
            if isinstance(record, Channel):
                channels[record.id] = record
            elif isinstance(record, Message):
                ch = channels.get(record.channel_id)
                if ch is not None:
                    yield McapMessage(ch.topic, record.log_time, record.data, ch.message_encoding)
