"""Fixtures of the unit tests (no JVM)."""
from __future__ import annotations

import pytest

from tests.support.servers.webhook import Server


@pytest.fixture
def webhooks():
    """`webhooks(statuses, gate=None)` starts a loopback webhook receiver (tests/support/servers/webhook.py);
    every one started is closed after the test."""
    servers = []

    def start(statuses, gate=None):
        servers.append(Server(statuses, gate))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
