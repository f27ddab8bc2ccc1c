"""Where a streamed action ends: the brace that closes it, one decode step before its EOS.

A server streams each token as it samples it, then runs one more forward pass on the last one
to sample the end-of-sequence token, whose chunk says the answer is complete. For a compact
action that pass decides nothing: once the closing brace of the top-level object is out, the
grammar admits only the end. So the client stops reading there, and the call ends one decode
step sooner (a step in six to ten of a compact action's). Closing the stream frees the
server's slot, as at a deadline.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ActionEnd"]


class ActionEnd:
    """Reads an action's JSON text as it streams in; says when its top-level value closed.

    Only an object or an array can close before the end token: a number may go on with another
    digit, and a string or literal value is rare enough as an action not to matter.
    """

    __slots__ = ("_closed", "_depth", "_escaped", "_in_string", "_started")

    def __init__(self) -> None:
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._started = False
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once the top-level object (or array) was closed."""
        return self._closed

    def feed(self, text: str) -> bool:
        """Read the next piece of the action's text; True once its top-level value closed."""
        for ch in text:
            if self._closed or self._depth < 0:
                break
            if not self._started:
                self._started = True
                if ch not in "{[":
                    self._depth = -1  # not an object or an array: never closes early
                    break
            self._read(ch)
        return self._closed

    def enough(self, text: str, logprobs: Sequence[float]) -> bool:
        """True once the action closed: :meth:`feed`, as a stream reader of the server backend."""
        del logprobs  # where an action ends is in its text
        return self.feed(text)

    def _read(self, ch: str) -> None:
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif ch == "\\":
                self._escaped = True
            elif ch == '"':
                self._in_string = False
        elif ch == '"':
            self._in_string = True
        elif ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            self._closed = self._depth == 0
