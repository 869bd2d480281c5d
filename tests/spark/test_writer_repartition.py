"""`recover run JOB --mode repartition --partitions N` on the in-memory store, where Spark's offline repartition
reads RocksDB state only: StateOps' writer re-places every store's rows (a join's four stores too) into N partitions
at the same batch, with no input read again.

Oracles: Spark's state reader (the same rows, every operator and store, at the same batch; each row in the partition
`pmod(hash(key), N)` puts it, N partitions in all), the offset log (the count the restart runs with), the file-source
log (the restart read only the files that arrived after it), the batch recomputation of the input
(tests/support/outcomes.py)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.jobs.definition.environment import Environment
from stateops.jobs.demo.generator import generate
from stateops.jobs.runtime.recovery import recover
from stateops.jobs.runtime.runner import run_job
from stateops.recovery import RecoveryRequest
from tests.support.audit_queries import state_rows
from tests.support.outcomes import assert_equals_oracle
from tests.support.scenarios import SMALL, builtin, more_input

pytestmark = pytest.mark.spark

INPUT = {"order_payments": replace(SMALL, orders=80)}


def _configure(layout, monkeypatch) -> None:
    for name, value in {"STATEOPS_HOME": layout.home, "STATEOPS_RECOVERY_VERIFY_BATCHES": "1",
                        "STATEOPS_ARCHIVE_MIN_FREE_BYTES": "0"}.items():
        monkeypatch.setenv(name, value)


# user_activity (aggregation after a dedup) in the default run; order_payments (a join's four stores, the values'
# index left out of the placement) in the long tier
@pytest.mark.parametrize("job", ["user_activity", pytest.param("order_payments", marks=pytest.mark.long)])
def test_the_in_memory_store_repartitions_through_the_writer_with_no_replay(spark, layout, monkeypatch, job):
    _configure(layout, monkeypatch)
    generate(layout, INPUT.get(job, SMALL))
    environment = Environment.from_env(layout=layout)
    run_job(spark, environment.catalog.job(job), layout, settings=environment.settings)
    checkpoint = Checkpoint.open(layout.checkpoint(job))
    batch = checkpoint.latest_committed_batch()
    before = state_rows(spark, checkpoint.path, batch, by_partition=False)
    read_before = {p for p, _ in checkpoint.source_files().get(0, [])}
    if job == "order_payments":
        generate(layout, replace(INPUT[job], files=2, events=0, orders=40, seed=61, first_order=61_000,
                                 start="2026-01-01T02:00:00+00:00"))
    else:
        more_input(layout, hour=2, seed=61)

    report = recover(environment, RecoveryRequest(job, "repartition", shuffle_partitions=8, confirm=job,
                                                  dry_run=False, reason="skew"), spark=spark)
    assert report.outcome == "succeeded", (report.error, report.verification)
    after = Checkpoint.open(checkpoint.path)
    assert state_rows(spark, checkpoint.path, batch, by_partition=False) == before, "the same rows at the same batch"
    assert any(before.values())
    assert after.shuffle_partitions(batch) == 8 and after.shuffle_partitions(after.offset_batches()[-1]) == 8
    for (op, store), _ in before.items():
        reader = spark.read.format("statestore").option("batchId", batch).option("operatorId", op)
        rows = (reader.option("storeName", store) if store != "default" else reader).load(checkpoint.path)
        names = rows.schema["key"].dataType.fieldNames()
        placed = names[:-1] if store.endswith("keyWithIndexToValue") else names
        wrong = rows.where(f"partition_id != pmod(hash({', '.join(f'key.`{n}`' for n in placed)}), 8)").count()
        assert wrong == 0 and {r.partition_id for r in rows.select("partition_id").collect()} <= set(range(8))
    assert {f.partition_id for f in after.state_files() if f.version == batch + 1} == set(range(8))
    (step,) = [e["details"] for e in report.steps if e["step"] == "repartition" and e["phase"] == "done"]
    assert "StateOps writer" in step["how"]
    cut = checkpoint.source_offsets(batch)[0]["logOffset"]
    new_reads = [p for p, entry in after.source_files().get(0, []) if entry > cut]
    assert new_reads and not set(new_reads) & read_before, "the restart read only the new files"
    assert after.committed_batches()[-1] > batch
    assert_equals_oracle(layout, builtin(layout, job))
