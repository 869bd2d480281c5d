"""Homes as StateOps left them when a job ran as two queries: the stateful query writing the output, and a dead-letter
query reading every line again into the dead-letter table under its own checkpoint (`checkpoints/_deadletter/<job>`,
its rows `input`, `raw`, `raw_bytes`, `error`, `batch_id`, `recorded_at`, its Delta transactions under the app id of
its checkpoint). Each query is run alone here, so a test puts them at the points of the input a real home can show
them at: one behind the other, either way, or a batch written and not committed (stateops.jobs.runtime.retirement).
"""
from __future__ import annotations

import os
from collections import Counter
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from stateops.delta import write_batch
from stateops.layout import Layout
from stateops.sinkstate import query_app_id

from stateops.jobs.runtime.sink import DeltaSink
from stateops.jobs.runtime.sources import invalid_rows, raw_lines
from stateops.jobs.runtime.start import ensure_landing, start_query, state_conf, stateful_frame

from tests.support import oracle
from tests.support.delta_rows import table_rows
from tests.support.outcomes import COLUMNS

LEGACY_COLUMNS = ["input", "raw", "raw_bytes", "error"]


def run_stateful_query(spark, spec, layout: Layout) -> None:
    """The job's stateful query over the input there is, into its output table only (bounded)."""
    ensure_landing(spec, layout)
    checkpoint = spec.checkpoint_path(layout)
    sink = DeltaSink(spec.name, spec.sink_path(layout), checkpoint, spec.merge_keys, row_key=spec.idempotent_key,
                     time_column=spec.output_time_column)
    start_query(stateful_frame(spark, spec, layout), spec.name, sink, "bounded", spec.output_mode, spec, checkpoint,
                state_conf=state_conf(spark, spec, layout)).awaitTermination()


def run_deadletter_query(spark, spec, layout: Layout, uncommit_last: bool = False) -> None:
    """The old dead-letter query over the input there is (bounded), as it wrote. `uncommit_last`: its newest batch
    then loses its commit file, as when the run died between the Delta write and Spark's commit."""
    ensure_landing(spec, layout)
    checkpoint = layout.deadletter_checkpoint(spec.name)
    table = layout.deadletter_table(spec.name)
    frame = reduce(DataFrame.unionByName, [invalid_rows(raw_lines(spark, spec, layout, inp), inp, spec)
                                           .select(*LEGACY_COLUMNS) for inp in spec.inputs])

    def write(df: DataFrame, batch_id: int) -> None:
        data = df.withColumn("batch_id", F.lit(batch_id).cast("long")) \
            .withColumn("recorded_at", F.current_timestamp()).toArrow()
        if data.num_rows:
            write_batch(table, data, app_id=query_app_id(spec.name, checkpoint), batch_id=batch_id)

    query = (frame.writeStream.queryName(f"{spec.name}__deadletter").foreachBatch(write)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    if uncommit_last:
        commits = os.path.join(checkpoint, "commits")
        newest = max(int(n) for n in os.listdir(commits) if n.isdigit())
        os.remove(os.path.join(commits, str(newest)))


# --- oracles of a user_activity home (tests/spark/test_deadletters.py, tests/e2e/test_retirement_faults.py) ---

def expected_deadletters(layout: Layout) -> Counter:
    """Each rejected line of every landing file of `events`, as many times as it occurs."""
    return Counter(line for arrival, lines in oracle.landing_batches(layout.landing("events")) for line in lines
                   if oracle.parse_line("events", line, arrival) is None)


def deadletters(layout: Layout, job: str = "user_activity") -> Counter:
    """The dead-letter table's lines (`raw`), as many times as it holds each."""
    return Counter(raw for (raw,) in table_rows(layout.deadletter_table(job), ["raw"]))


def output_is_the_oracle(layout: Layout, spec) -> None:
    """user_activity's table: no row twice, and the batch recomputation of its input as its runs composed it."""
    got = table_rows(spec.sink_path(layout), COLUMNS["user_activity"])
    batches = oracle.typed_batches(layout.landing("events"), "events", spec.checkpoint_path(layout))
    assert len(got) == len(set(got)) and set(got) == oracle.user_activity(batches, spec.watermark_seconds * 1000)
