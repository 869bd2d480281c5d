"""What the default run and the long tier each do (docs/testing.md).

`bash scripts/test` is the default run (CI, every change); `bash scripts/test --full` sets
STATEOPS_TEST_TIER=full and adds the tests marked `long`. A test that runs in both tiers but repeats a random
trial (a kill trial, a random retention policy) asks `trials(...)` how many times: a few in the default run,
the full count in the long tier.
"""
from __future__ import annotations

import os

FULL = os.environ.get("STATEOPS_TEST_TIER") == "full"


def trials(default: int, full: int = 20) -> int:
    """Random trials (kill trials per chain, random policies): `default` in the default run, `full` in the long
    tier."""
    return full if FULL else default
