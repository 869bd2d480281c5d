"""Free loopback ports for the servers the tests start."""
from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A loopback port nobody listens on now (the servers of the tests start on one)."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]
