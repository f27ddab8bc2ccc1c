"""A free TCP port on the loopback interface, for a server a test or a benchmark starts."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now.

    The port is released before this returns: another process may take it before the caller's
    server binds it, which on a test machine's loopback is rare enough to live with.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
