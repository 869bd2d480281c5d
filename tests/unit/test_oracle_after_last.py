"""The oracles' last eviction: Spark closes sessions and times out groups by the watermark after a batch only in a
next batch. A bounded run over one file per batch ends with that no-data batch (the oracles' default); batches read
from a checkpoint's logs list every no-data batch Spark ran, and a run stopped right after a data batch, restarted
with no new input, runs none (the fleet soak's tables: tests/support/fleet/checks.py)."""
from __future__ import annotations

import pytest

from tests.support import oracle

pytestmark = pytest.mark.unit

MINUTE = 60_000
DELAY = 10 * MINUTE
# u1 at 1 minute, u2 at 60: the watermark after the batch is 50 minutes, past u1's session gap (15 minutes)
# and its action timeout (30 minutes); nothing passes the watermark in force during the batch (0).
DATA = [{"t": MINUTE, "user_id": "u1", "action": "click", "event_id": "a", "value": 1},
        {"t": 60 * MINUTE, "user_id": "u2", "action": "view", "event_id": "b", "value": 1}]


@pytest.mark.parametrize("job", [oracle.user_sessions, oracle.user_actions])
def test_the_watermark_after_the_last_batch_closes_only_when_asked(job):
    closed = job([DATA], DELAY)
    assert {row for row in closed if "u1" in row} and not {row for row in closed if "u2" in row}
    assert job([DATA], DELAY, after_last=False) == set(), "no batch ran after the data batch"


@pytest.mark.parametrize("job", [oracle.user_sessions, oracle.user_actions])
def test_a_logged_no_data_batch_closes_what_the_final_watermark_would(job):
    assert job([DATA, []], DELAY, after_last=False) == job([DATA], DELAY) == job([DATA, []], DELAY)
