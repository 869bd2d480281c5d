"""A runbook killed after each of its steps (SIGKILL at fault points, stateops/faults.py), run again each time
from the CLI in a new process: every attempt resumes where the last one died, no destructive step runs
twice, the archive verifies whenever it exists, nothing is lost, and the last attempt ends with a healthy
query whose table equals the oracle.

The runbook is a rewind over a checkpoint whose file-source log was compacted (9.compact) and cleaned
(entries 0..8 gone, as Spark removes them after compaction): the cut must write the entries up to the
source offset of batch N back from the compact file. Kill points: after `stop`, `audit_before`, `adjust`,
`restart` and `verify` were journaled done; and after `archive`, `rewind_cut` and `align_sink` acted but
before they were journaled (the interrupted step must be completed, not repeated)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal

import pytest
from deltalake import DeltaTable

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import maintenance, overrides
from stateops.delta import read_table
from stateops.checkpoints import archive
from stateops.runbooks import read_entries
from tests.support import oracle
from tests.support.cli_attempts import attempt
from tests.support.delta_rows import table_rows

pytestmark = [pytest.mark.e2e, pytest.mark.long]

JOB = "user_activity"
TO_BATCH = 4
INPUT = GeneratorConfig(events=660, files=12, users=25, late_share=0.05, duplicate_share=0.05, minutes_per_file=15,
                        seed=41)
KILLS = [("runbook.after_step", "stop"), ("runbook.after_step", "audit_before"), ("runbook.before_done", "archive"),
         ("runbook.after_step", "adjust"), ("runbook.before_done", "rewind_cut"),
         ("runbook.before_done", "align_sink"), ("runbook.after_step", "restart"), ("runbook.after_step", "verify")]
COMMAND = ["recover", "run", JOB, "--mode", "rewind", "--to-batch", str(TO_BATCH), "--confirm", JOB, "--json"]


def _sums(root: str) -> dict[str, str]:
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as handle:
                out[os.path.relpath(os.path.join(folder, name), root)] = hashlib.sha256(handle.read()).hexdigest()
    return out


def test_killed_after_every_step_the_runbook_resumes_and_converges(spark, layout, monkeypatch):
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "2")
    monkeypatch.setenv("STATEOPS_ARCHIVE_MIN_FREE_BYTES", "0")
    generate(layout, INPUT)
    spec = get_job(JOB)
    checkpoint = spec.checkpoint_path(layout)
    run_job(spark, spec, layout, settings=read_settings())
    sources = os.path.join(checkpoint, "sources", "0")
    assert os.path.exists(os.path.join(sources, "9.compact"))
    for batch in range(9):  # Spark's cleanup after compaction (10 minutes later)
        os.remove(os.path.join(sources, str(batch)))
        with contextlib.suppress(FileNotFoundError):  # Hadoop's checksum: the create-once commit points write none
            os.remove(os.path.join(sources, f".{batch}.crc"))
    original = _sums(checkpoint)
    root = spec.archive_path(layout)

    runbook = None
    for point, step in KILLS:
        done = attempt(layout.home, COMMAND, f"{point}:step={step}")
        assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
        assert f"fault {point} job={JOB} step={step}" in done.stderr
        runbook = runbook or maintenance.current(layout, JOB).runbook_id
        assert maintenance.current(layout, JOB).runbook_id == runbook, "one runbook, resumed each time"
        journal = read_entries(archive.runbook_dir(root, runbook))
        phases = [e["phase"] for e in journal if e["step"] == step]
        assert phases[-1] == ("done" if point == "runbook.after_step" else "started"), (step, phases)
        if archive.manifest(root, runbook) is not None:
            assert archive.verify(root, runbook) == [], f"the archive verifies after the kill at {step}"
            assert {f["path"]: f["sha256"] for f in archive.manifest(root, runbook)["files"]} == original
        else:
            assert _sums(checkpoint) == original, "nothing changed before the archive exists"

    final = attempt(layout.home, COMMAND, None)
    assert final.returncode == 0, final.stderr[-3000:]
    report = json.loads(final.stdout)
    assert report["outcome"] == "succeeded" and report["runbook_id"] == runbook
    journal = read_entries(archive.runbook_dir(root, runbook))
    for step in ("stop", "audit_before", "archive", "adjust", "rewind_cut", "align_sink", "restart", "verify"):
        assert [e["phase"] for e in journal if e["step"] == step].count("done") == 1, step
    history = DeltaTable(layout.table(JOB)).history()
    assert [h["operation"] for h in history].count("RESTORE") == 1, "the sink was restored once"
    assert [c.setting for c in overrides.history(layout, JOB)] == ["sink_epoch"], "one new epoch"
    assert maintenance.current(layout, JOB) is None

    # Entries 0..N had been cleaned: only the cut writes them back, from 9.compact (an interrupted cut, then its
    # completion). The restarted query then logs batches N+1.. again, compacting at 9 again.
    kept = set(os.listdir(sources))
    assert {str(b) for b in range(TO_BATCH + 1)} <= kept
    assert os.path.exists(os.path.join(archive.runbook_dir(root, runbook), archive.CHECKPOINT, "sources", "0",
                                       "9.compact"))
    (restart,) = [e["details"] for e in journal if e["step"] == "restart" and e["phase"] == "done"]
    rows = read_table(layout.ops_table("progress"), filters=[("stateops_run_id", "=", restart["run_id"])]).to_pylist()
    assert min(r["batch_id"] for r in rows if r["query_name"] == JOB) == TO_BATCH + 1
    assert Checkpoint(checkpoint).latest_committed_batch() >= INPUT.files - 1
    batches = oracle.typed_batches(layout.landing("events"), "events", checkpoint)
    got = table_rows(layout.table(JOB), ["window_start", "window_end", "user_id", "events", "value_sum"])
    assert len(got) == len(set(got)) and set(got) == oracle.user_activity(batches, spec.watermark_seconds * 1000)
