"""The migration killed at random places (SIGKILL at fault points, stateops/faults.py), run again each time from the
CLI in a new process: inside it (after the rewritten operator was written to the scratch, after kept state files
moved, after the old state left) and around it (the step acted but not yet journaled, journaled done, the restart
done). Each attempt resumes the one runbook; the last ends with the table equal, row for row, to the new query run
from scratch over all input (nothing lost, nothing duplicated), and the old state restorable from the runbook's
archive: restored, the old query fits it again (its meaning record comes back with it) and it is the old state, row
for row (Spark's state reader).

The job (on the in-memory store, which the test's own Spark session reads as the job's does): a dedup, then an
aggregation whose two same-typed aggregates the change reorders: the aggregation is
rewritten, the dedup's files kept (moved). The kills are drawn from the points the migration passes (seeded, so a
failure replays); `STATEOPS_TEST_SEED` picks other draws."""
from __future__ import annotations

import json
import os
import random
import signal
from dataclasses import replace

import pytest

from stateops.checkpoints import archive
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import maintenance
from stateops.jobs.demo.generator import generate
from stateops.runbooks import read_entries
from tests.support.audit_queries import state_rows
from tests.support.cli_attempts import attempt
from tests.support.delta_rows import table_rows
from tests.support.migration_job import FRESH, JOB, config, write_code
from tests.support.scenarios import SMALL

pytestmark = [pytest.mark.e2e, pytest.mark.long]

SEED = int(os.environ.get("STATEOPS_TEST_SEED", "7"))
INSIDE = ["part=write,n=0", "part=moved,n=1", "part=moved,n=4", "part=swapped"]
AROUND = [("runbook.before_done", "step=migrate_state"), ("runbook.after_step", "step=migrate_state"),
          ("runbook.after_step", "step=restart")]
COLUMNS = ["window_start", "window_end", "group_key", "events", "hi", "lo"]
MORE = replace(SMALL, files=2, events=200, seed=9, start="2026-01-01T00:50:00+00:00", minutes_per_file=10)


def _ok(done) -> None:
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])


def test_a_migration_killed_anywhere_resumes_and_the_old_state_stays_restorable(spark, layout, tmp_path,
                                                                                 monkeypatch):
    code = write_code(str(tmp_path / "user_code"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")])))
    for name, value in {"STATEOPS_HOME": layout.home, "STATEOPS_RECOVERY_VERIFY_BATCHES": "1",
                        "STATEOPS_ARCHIVE_MIN_FREE_BYTES": "0"}.items():
        monkeypatch.setenv(name, value)
    old = config(tmp_path, "memory", **{JOB: "hi_lo_deduped"})
    generate(layout, SMALL)
    _ok(attempt(layout.home, ["--config", old, "jobs", "run", JOB]))
    checkpoint = layout.checkpoint(JOB)
    batch = Checkpoint.open(checkpoint).latest_committed_batch()
    before = state_rows(spark, checkpoint, batch)
    assert all(before.values()) and len(before) == 2, "a dedup and an aggregation, both holding state"
    generate(layout, MORE)

    new = config(tmp_path, "memory", **{JOB: "lo_hi_deduped", FRESH: "lo_hi_deduped"})
    draw = random.Random(SEED)
    kills = [("migrate.part", f"job={JOB},{at}") for at in sorted(draw.sample(INSIDE, 3), key=INSIDE.index)]
    kills += AROUND
    command = ["--config", new, "recover", "run", JOB, "--mode", "migrate", "--confirm", JOB, "--json"]
    root = os.path.join(layout.ops_dir(JOB), "archives")
    runbook = None
    for point, at in kills:
        done = attempt(layout.home, command, f"{point}:{at}")
        assert done.returncode == -signal.SIGKILL, (point, at, done.stderr[-3000:])
        assert f"fault {point} job={JOB}" in done.stderr
        runbook = runbook or maintenance.current(layout, JOB).runbook_id
        assert maintenance.current(layout, JOB).runbook_id == runbook, "one runbook, resumed each time"
        assert archive.verify(root, runbook) == [], f"the archive verifies after the kill at {point}:{at}"

    final = attempt(layout.home, command)
    _ok(final)
    report = json.loads(final.stdout)
    assert report["outcome"] == "succeeded" and report["runbook_id"] == runbook
    journal = read_entries(archive.runbook_dir(root, runbook))
    assert [e["phase"] for e in journal if e["step"] == "migrate_state"].count("done") == 1
    _ok(attempt(layout.home, ["--config", new, "jobs", "run", FRESH]))
    migrated = set(table_rows(layout.table(JOB), COLUMNS))
    fresh = set(table_rows(layout.table(FRESH), COLUMNS))
    assert migrated == fresh, (sorted(migrated - fresh)[:3], sorted(fresh - migrated)[:3])

    # The old state is in the archive: restored, the old query's record comes back with it and it fits again.
    _ok(attempt(layout.home, ["--config", old, "recover", "run", JOB, "--mode", "restore", "--archive", runbook,
                              "--confirm", JOB, "--json"]))
    assert state_rows(spark, checkpoint, batch) == before, "the old state, row for row"
    check = attempt(layout.home, ["--config", old, "jobs", "check", JOB])
    assert check.returncode == 0 and "fits the state" in check.stdout, check.stdout + check.stderr[-2000:]
