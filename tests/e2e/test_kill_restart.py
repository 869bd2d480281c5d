"""A crashed run, then a restart: the table equals the oracle exactly (no duplicate, no loss, nothing
invented), and the dead letters are all there.

The crash is a SIGKILL of the driver (its JVM exits with it) at a fault point (stateops/faults.py) right
after the Delta commit of batch N, before Spark writes commits/N, after which the restart re-runs batch N
and the sink must skip exactly that batch (for the MERGE job a second write would be idempotent: the skip
count and the Delta log tell). `kill -9` at random points, 20 trials: tests/e2e/test_fault_suite.py.

Measured on Spark 4.2.0: a re-run batch reads the files offsets/N names and drops late rows against the
watermark in offsets/N-1, so it emits what its first attempt emitted. But a kill after the file source
logged its next file and before offsets/N makes the restart's first batch read two files, and late rows
of the second are then judged against an older watermark. So the oracle replays the batches as the
checkpoint's logs say the run composed them."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from deltalake import DeltaTable

from jobs.catalog import load_jobs
from jobs.generator import GeneratorConfig, generate
from jobs.runner import run_job
from jobs.sink import query_app_id
from stateops.delta import open_table
from stateops.faults import ENV
from tests import oracle
from tests.delta_rows import committed_transactions, table_rows

pytestmark = pytest.mark.e2e

# Late rows 30 minutes behind their file land in windows that already hold rows: a re-executed batch that
# admitted them would overwrite a closed window with a smaller partial count.
FAULT_INPUT = GeneratorConfig(events=1200, files=6, users=40, late_share=0.04, late_minutes=30,
                              duplicate_share=0.05, malformed_share=0.02, orders=150, minutes_per_file=15, seed=17)
STATEOPS = os.path.join(os.path.dirname(sys.executable), "stateops")
COLUMNS = {"order_payments": ["order_id", "payment_id", "order_time", "payment_time"],
           "user_activity": ["window_start", "window_end", "user_id", "events", "value_sum"]}


def _run_until_fault(job: str, home: str, fault: str) -> None:
    """`stateops jobs run JOB` in its own process group until the fault kills it; its JVM must follow."""
    proc = subprocess.Popen([STATEOPS, "jobs", "run", job], env={**os.environ, "STATEOPS_HOME": home, ENV: fault},
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == -signal.SIGKILL, err[-2000:]
        assert f"fault {fault.split(':')[0]}" in err
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
        raise AssertionError("the JVM outlived its killed driver")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _assert_table_equals_oracle(layout, job: str) -> None:
    spec = load_jobs()[job]
    delay = spec.watermark_seconds * 1000
    batches = {i.name: oracle.typed_batches(layout.landing(i.name), i.name, layout.checkpoint(job))
               for i in spec.inputs}
    expected = (oracle.order_payments(batches["orders"], batches["payments"], delay) if job == "order_payments"
                else oracle.user_activity(batches["events"], delay))
    got = table_rows(layout.table(job), COLUMNS[job])
    assert len(got) == len(set(got)), "no duplicate rows after the restart"
    assert set(got) == expected, f"{len(set(got) - expected)} rows not in the oracle, {len(expected - set(got))} missing"
    malformed = sum(oracle.malformed_count(layout.landing(i.name), i.name) for i in spec.inputs)
    dead = table_rows(layout.deadletter_table(job), ["raw"]) if open_table(layout.deadletter_table(job)) else []
    assert len(dead) == malformed


@pytest.mark.parametrize("job", ["order_payments", "user_activity"])
def test_crash_after_delta_commit_restart_skips_exactly_that_batch(spark, layout, job, delta_writer):
    """On both Delta writers (tests/conftest.py delta_writer): the killed process and the restart alike."""
    crashed = 3
    generate(layout, FAULT_INPUT)
    table = layout.table(job)
    _run_until_fault(job, layout.home, f"sink.after_commit:table={job},batch={crashed}")

    logs = layout.checkpoint(job)
    assert os.path.exists(f"{logs}/offsets/{crashed}") and not os.path.exists(f"{logs}/offsets/{crashed + 1}")
    assert os.path.exists(f"{logs}/commits/{crashed - 1}") and not os.path.exists(f"{logs}/commits/{crashed}")
    app_id = query_app_id(job, layout.checkpoint(job))
    assert DeltaTable(table).transaction_version(app_id) == crashed, "but in Delta"
    before = [t for t in committed_transactions(table) if t[0] == app_id]

    result = run_job(spark, load_jobs()[job], layout)

    assert result.batches_skipped == 1
    after = [t for t in committed_transactions(table) if t[0] == app_id]
    batches = [batch for _, batch, _ in after]
    assert len(batches) == len(set(batches)), "a batch was committed twice"
    assert after[:len(before)] == before and crashed + 1 in batches
    for name in {i.name for i in load_jobs()[job].inputs}:  # the re-run batch read the same file as before
        as_run = oracle.files_as_run(layout.checkpoint(job), layout.landing(name))
        assert [b for b in as_run if b] == [[path] for path in oracle.landing_files(layout.landing(name))]
    _assert_table_equals_oracle(layout, job)
