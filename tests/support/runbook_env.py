"""The environment of a runbook test against a long-running job: a config with a 2 s trigger and 4 shuffle
partitions (and `state_store`, when given), the runbook's timing for the test, archives allowed on any disk; returns the environment for the
processes the test starts (the home included)."""
from __future__ import annotations

import os


def runbook_env(layout, tmp_path, monkeypatch, job: str, *, verify_batches: int, verify_timeout: float,
                stop_timeout: float, state_store: str | None = None) -> dict[str, str]:
    config = tmp_path / "stateops.toml"
    config.write_text(f'[jobs.{job}]\ntrigger_interval = "2 seconds"\nshuffle_partitions = 4\n'
                      + (f'state_store = "{state_store}"\n' if state_store else ""))
    values = {"STATEOPS_CONFIG": str(config), "STATEOPS_RECOVERY_VERIFY_BATCHES": str(verify_batches),
              "STATEOPS_RECOVERY_VERIFY_TIMEOUT_SECONDS": str(verify_timeout),
              "STATEOPS_RECOVERY_STOP_TIMEOUT_SECONDS": str(stop_timeout), "STATEOPS_ARCHIVE_MIN_FREE_BYTES": "0"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return {**os.environ, "STATEOPS_HOME": layout.home}
