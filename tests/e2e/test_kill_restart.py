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

import pytest
from deltalake import DeltaTable

from stateops.jobs.definition.environment import load_jobs, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.sinkstate import query_app_id
from tests.support import oracle
from tests.support.delta_rows import committed_transactions
from tests.support.kill_trials import run_until_fault
from tests.support.outcomes import assert_equals_oracle

pytestmark = pytest.mark.e2e

# Late rows 30 minutes behind their file land in windows that already hold rows: a re-executed batch that
# admitted them would overwrite a closed window with a smaller partial count.
FAULT_INPUT = GeneratorConfig(events=800, files=4, users=40, late_share=0.04, late_minutes=30,
                              duplicate_share=0.05, malformed_share=0.02, orders=150, minutes_per_file=15, seed=17)


@pytest.mark.parametrize("job, delta_writer", [
    ("order_payments", "delta-rs"),
    # The long tier adds the other three pairs; the default run's skips by another writer's transaction:
    # tests/spark/test_delta_engines.py (appends and MERGEs, both engines), and the random kill chains on files
    # (tests/e2e/test_fault_suite.py) alternate the writers.
    pytest.param("user_activity", "spark", marks=pytest.mark.long),
    pytest.param("order_payments", "spark", marks=pytest.mark.long),
    pytest.param("user_activity", "delta-rs", marks=pytest.mark.long)], indirect=["delta_writer"])
def test_crash_after_delta_commit_restart_skips_exactly_that_batch(spark, layout, job, delta_writer):
    """On both Delta writers (tests/conftest.py delta_writer): the killed process and the restart alike; the
    append job on delta-rs and the MERGE job on Delta's Spark writer in the default run, every pair in the long
    tier."""
    crashed = 2
    generate(layout, FAULT_INPUT)
    table = layout.table(job)
    run_until_fault(job, layout.home, f"sink.after_commit:table={job},batch={crashed}")

    logs = layout.checkpoint(job)
    assert os.path.exists(f"{logs}/offsets/{crashed}") and not os.path.exists(f"{logs}/offsets/{crashed + 1}")
    assert os.path.exists(f"{logs}/commits/{crashed - 1}") and not os.path.exists(f"{logs}/commits/{crashed}")
    app_id = query_app_id(job, layout.checkpoint(job))
    assert DeltaTable(table).transaction_version(app_id) == crashed, "but in Delta"
    before = [t for t in committed_transactions(table) if t[0] == app_id]

    spec = load_jobs()[job]
    result = run_job(spark, spec, layout, settings=read_settings())

    assert result.batches_skipped == 1
    after = [t for t in committed_transactions(table) if t[0] == app_id]
    batches = [batch for _, batch, _ in after]
    assert len(batches) == len(set(batches)), "a batch was committed twice"
    assert after[:len(before)] == before and crashed + 1 in batches
    for name in {i.name for i in spec.inputs}:  # the re-run batch read the same file as before
        as_run = oracle.files_as_run(layout.checkpoint(job), layout.landing(name))
        assert [b for b in as_run if b] == [[path] for path in oracle.landing_files(layout.landing(name))]
    assert_equals_oracle(layout, spec)
