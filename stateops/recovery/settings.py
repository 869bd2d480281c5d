"""Timing and safety margins of the runbook, from the environment (every process that runs runbooks should
see the same values):

  STATEOPS_RECOVERY_STOP_TIMEOUT_SECONDS    120  how long the stop step waits for the running query's lease
  STATEOPS_RECOVERY_VERIFY_BATCHES            3  batches the restarted query must complete without error
  STATEOPS_RECOVERY_VERIFY_TIMEOUT_SECONDS  300  how long verification waits for them (a long-running query)
  STATEOPS_ARCHIVE_MARGIN                   0.2  the archive needs its size x (1 + margin) free ...
  STATEOPS_ARCHIVE_MIN_FREE_BYTES    1073741824  ... and leaves at least this much free on its filesystem
"""
from __future__ import annotations

from dataclasses import dataclass

from stateops.environment import numbers
from stateops.errors import ConfigError

ENV = {
    "stop_timeout_seconds": "STATEOPS_RECOVERY_STOP_TIMEOUT_SECONDS",
    "verify_batches": "STATEOPS_RECOVERY_VERIFY_BATCHES",
    "verify_timeout_seconds": "STATEOPS_RECOVERY_VERIFY_TIMEOUT_SECONDS",
    "archive_margin": "STATEOPS_ARCHIVE_MARGIN",
    "archive_min_free_bytes": "STATEOPS_ARCHIVE_MIN_FREE_BYTES",
}


@dataclass(frozen=True)
class RecoverySettings:
    stop_timeout_seconds: float = 120.0
    verify_batches: int = 3
    verify_timeout_seconds: float = 300.0
    archive_margin: float = 0.2
    archive_min_free_bytes: int = 1 << 30
    poll_seconds: float = 1.0

    def __post_init__(self) -> None:
        for name, variable in ENV.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (
                    name in ("verify_batches", "verify_timeout_seconds") and value <= 0):
                raise ConfigError(variable, f"{value!r} is not a valid value",
                                  "use a non-negative number (batches and timeouts: positive)")

    @classmethod
    def from_env(cls) -> "RecoverySettings":
        return cls(**numbers(ENV, integers=("verify_batches", "archive_min_free_bytes")))
