"""foreachBatch targets: exactly-once Delta writes (MERGE for update mode, append otherwise).

The writer is delta-rs (embedded default). When the delta-spark jars are already on the classpath the
JVM writer is used instead, with Delta's own idempotent-write options; both honour (app_id, batch_id).
"""
from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from stateops.delta import write_batch
from stateops.faults import fault_point
from stateops.fs import filesystem


def query_app_id(job: str, checkpoint: str) -> str:
    """Delta transaction app id: job plus the query id stored in the checkpoint (new checkpoint, new id)."""
    fs, path = filesystem(checkpoint.rstrip("/") + "/metadata")
    with fs.open(path, "r") as handle:
        query_id = json.loads(handle.readline())["id"]
    return f"stateops/{job}/{query_id}"


def _write_with_jvm(df: DataFrame, uri: str, app_id: str, batch_id: int, merge_keys: Sequence[str]) -> int:
    from delta.tables import DeltaTable

    spark = df.sparkSession
    rows = df.count()
    if not merge_keys or not DeltaTable.isDeltaTable(spark, uri):
        (df.write.format("delta").mode("append").option("txnAppId", app_id)
         .option("txnVersion", batch_id).save(uri))
        return rows
    spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
    condition = " AND ".join(f"t.{k} = s.{k}" for k in merge_keys)
    (DeltaTable.forPath(spark, uri).alias("t").merge(df.alias("s"), condition)
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    return rows


@dataclass
class DeltaSink:
    """Writes each micro-batch once into `table_uri`; counts rows and batches skipped as already written
    (delta-rs path), and remembers the Delta version."""

    job: str
    table_uri: str
    checkpoint: str
    merge_keys: tuple[str, ...] = ()
    tag_batch_id: bool = False
    use_jvm: bool = False
    rows_written: int = 0
    batches_skipped: int = 0
    version: int | None = None
    _app_id: str | None = field(default=None, repr=False)

    def app_id(self) -> str:
        if self._app_id is None:
            self._app_id = query_app_id(self.job, self.checkpoint)
        return self._app_id

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        if self.tag_batch_id:
            df = df.withColumn("batch_id", F.lit(batch_id).cast("long"))
        where = {"job": self.job, "table": posixpath.basename(self.table_uri.rstrip("/")), "batch": batch_id}
        if self.use_jvm:
            fault_point("sink.before_commit", **where)
            self.rows_written += _write_with_jvm(df, self.table_uri, self.app_id(), batch_id, self.merge_keys)
            fault_point("sink.after_commit", **where)
            return
        data = df.toArrow()
        if data.num_rows == 0:
            return
        fault_point("sink.before_commit", **where)
        result = write_batch(self.table_uri, data, app_id=self.app_id(), batch_id=batch_id,
                             merge_keys=self.merge_keys)
        self.rows_written += result.rows
        self.batches_skipped += int(result.skipped)
        self.version = result.version
        if not result.skipped:
            # Crash tests stop here: the batch is in Delta, Spark's commit log does not know it yet.
            fault_point("sink.after_commit", **where)
