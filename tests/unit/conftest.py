"""Fixtures of the unit tests (no JVM)."""
from __future__ import annotations

import pytest

from stateops import redaction

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


@pytest.fixture
def no_known_secrets(monkeypatch):
    """Each test starts with no registered secret and no secret variable (the registry is per process)."""
    monkeypatch.setattr(redaction, "_known", {})
    for name in redaction.SECRET_VARIABLES:
        monkeypatch.delenv(name, raising=False)
