"""Timing of the control plane: how often a holder heartbeats, when a silent lease is stale, how long a stop
may wait for the batch in flight.

Environment, in seconds (every process that runs or inspects jobs should see the same values):
  STATEOPS_LEASE_HEARTBEAT_SECONDS  10  the holder rewrites its lease's heartbeat this often
  STATEOPS_LEASE_TIMEOUT_SECONDS    60  a lease without a heartbeat for this long may be taken over
  STATEOPS_STOP_GRACE_SECONDS       60  a graceful stop hard-stops the queries after this long
"""
from __future__ import annotations

from dataclasses import dataclass

from stateops.environment import numbers
from stateops.errors import ConfigError

ENV = {
    "heartbeat_seconds": "STATEOPS_LEASE_HEARTBEAT_SECONDS",
    "lease_timeout_seconds": "STATEOPS_LEASE_TIMEOUT_SECONDS",
    "stop_grace_seconds": "STATEOPS_STOP_GRACE_SECONDS",
}


@dataclass(frozen=True)
class ControlSettings:
    heartbeat_seconds: float = 10.0
    lease_timeout_seconds: float = 60.0
    stop_grace_seconds: float = 60.0

    def __post_init__(self) -> None:
        for name, variable in ENV.items():
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(variable, f"{value!r} is not a positive number of seconds",
                                  "use a positive number, e.g. 10")
        if self.lease_timeout_seconds < 3 * self.heartbeat_seconds:
            raise ConfigError(ENV["lease_timeout_seconds"],
                              f"{self.lease_timeout_seconds:g} s is less than 3 heartbeats "
                              f"({self.heartbeat_seconds:g} s each)",
                              "keep the timeout at least 3x the heartbeat, so one slow beat does not look dead")

    @classmethod
    def from_env(cls) -> "ControlSettings":
        return cls(**numbers(ENV))
