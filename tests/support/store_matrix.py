"""The support matrix's checkpoints (issue 51): each written by a plain PySpark query (not StateOps' runner) on the
store and formats its cell names, over the same small input, built once per module.

Cells: Spark's default store (the HDFS-backed in-memory store), RocksDB without and with changelog checkpointing,
checkpoint format 2 (zip-only and changelog, with a dedup, a join and transformWithState), dedup with and without a
watermark, windows after a dedup (two chained operators), session windows, joins in state formats 2, 3 and 4,
applyInPandasWithState, and transformWithStateInPandas with value (TTL), list and map state and event-time timers.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from stateops.checkpoints.state_store import (CHANGELOG, CHECKPOINT_FORMAT, HDFS_PROVIDER, JOIN_FORMAT, PROVIDER,
                                              ROCKSDB_PROVIDER)
from tests.support.tiers import FULL
from tests.support.audit_queries import event_stream, events, run_bounded, with_conf, write_batches

ROCKS = {PROVIDER: ROCKSDB_PROVIDER, CHANGELOG: "true"}
ZIP = {PROVIDER: ROCKSDB_PROVIDER, CHANGELOG: "false"}
MEMORY = {PROVIDER: HDFS_PROVIDER}
FORMAT2 = {CHECKPOINT_FORMAT: "2"}
# State that expires by processing time: no empty batches, or an availableNow run checks its timers forever
ONCE = {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}


def _watermarked(spark: SparkSession, folder: Path) -> DataFrame:
    return event_stream(spark, folder).withWatermark("event_time", "10 minutes")


def dedup_windows(spark, folder):
    return (_watermarked(spark, folder).dropDuplicatesWithinWatermark(["event_id"])
            .groupBy(F.window("event_time", "5 minutes"), "user_id").count()), "update"


def dedup(spark, folder):
    return _watermarked(spark, folder).dropDuplicatesWithinWatermark(["event_id"]), "append"


def dedup_no_watermark(spark, folder):
    return event_stream(spark, folder).dropDuplicates(["event_id"]), "append"


def sessions(spark, folder):
    return _watermarked(spark, folder).groupBy(F.session_window("event_time", "5 minutes"), "user_id").count(), \
        "append"


def join(spark, folder):
    left = _watermarked(spark, folder).select("event_id", "user_id", F.col("event_time").alias("left_time"))
    right = _watermarked(spark, folder).select(F.col("event_id").alias("id"), F.col("event_time").alias("right_time"))
    condition = F.expr("event_id = id AND right_time BETWEEN left_time AND left_time + interval 5 minutes")
    return left.join(right, condition), "append"


def pandas_state(spark, folder):
    from pyspark.sql.streaming.state import GroupStateTimeout

    def count(key, frames, state):
        import pandas as pd

        total = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
        state.update((total,))
        yield pd.DataFrame({"user_id": [key[0]], "events": [total]})

    return (event_stream(spark, folder).groupBy("user_id").applyInPandasWithState(
        count, "user_id STRING, events LONG", "events LONG", "Update", GroupStateTimeout.NoTimeout),
        "update")


def tws(spark, folder):
    """Value state with a TTL, list and map state, and a processing-time timer per user (Spark allows a TTL in
    processing-time mode only)."""
    from pyspark.sql.streaming import StatefulProcessor

    class Everything(StatefulProcessor):  # defined here: pickled by value for the Python workers
        def init(self, handle):
            self.handle = handle
            self.count = handle.getValueState("count", "n LONG", 3_600_000)
            self.seen = handle.getListState("seen", "event_id STRING")
            self.actions = handle.getMapState("actions", "action STRING", "events LONG")

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd

            total = self.count.get()[0] if self.count.exists() else 0
            for pdf in rows:
                self.seen.appendList([(event_id,) for event_id in pdf["event_id"]])
                for action, n in pdf["action"].value_counts().items():
                    before = self.actions.getValue((action,))
                    self.actions.updateValue((action,), ((before[0] if before else 0) + int(n),))
                total += len(pdf)
            self.count.update((total,))
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 30 * 60_000)
            yield pd.DataFrame({"user_id": [key[0]], "events": [total]})

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            self.seen.clear()
            return iter([])

        def close(self):
            pass

    return (event_stream(spark, folder).groupBy("user_id").transformWithStateInPandas(
        Everything(), "user_id STRING, events LONG", "Update", "ProcessingTime"), "update")


def join_on_user(spark, folder):
    """The join keyed on another column of the same type (a user id for an event id): the same schemas, other keys."""
    left = _watermarked(spark, folder).select("event_id", "user_id", F.col("event_time").alias("left_time"))
    right = _watermarked(spark, folder).select(F.col("event_id").alias("id"), F.col("event_time").alias("right_time"))
    condition = F.expr("user_id = id AND right_time BETWEEN left_time AND left_time + interval 5 minutes")
    return left.join(right, condition), "append"


# A query whose state does not fit each query's: another operator in the first place, or (the join) the same types
# keyed on another column.
CHANGED = {dedup_windows: sessions, dedup: sessions, dedup_no_watermark: sessions, sessions: dedup_windows,
           join: join_on_user, pandas_state: tws, tws: pandas_state}
# The kind of state explain-key is told each query keeps (ExplainTarget.kind)
KINDS = {sessions: "session", join: "join", pandas_state: "custom", tws: "custom"}


# cell -> (session settings, query)
CELLS: dict[str, tuple[dict[str, str], Callable]] = {
    "memory": (MEMORY, dedup_windows),
    "rocksdb_zip": (ZIP, dedup_windows),
    "rocksdb_changelog": (ROCKS, dedup_windows),
    "format2_changelog": ({**ROCKS, **FORMAT2}, dedup_windows),
    "format2_zip": ({**ZIP, **FORMAT2}, dedup),
    "dedup_no_watermark": (ROCKS, dedup_no_watermark),
    "sessions": (ROCKS, sessions),
    "memory_sessions": (MEMORY, sessions),
    "join2": ({**ROCKS, JOIN_FORMAT: "2"}, join),
    "memory_join2": ({**MEMORY, JOIN_FORMAT: "2"}, join),
    "join3": ({**ROCKS, JOIN_FORMAT: "3"}, join),
    "join4": ({**ROCKS, JOIN_FORMAT: "4"}, join),
    "format2_join4": ({**ROCKS, **FORMAT2, JOIN_FORMAT: "4"}, join),
    "pandas_state": (MEMORY, pandas_state),
    "tws": ({**ROCKS, **ONCE}, tws),
    "format2_tws": ({**ROCKS, **FORMAT2, **ONCE}, tws),
}


# The cells a run builds: checkpoint format 2 in the default run (the in-memory store and transformWithState have
# their default guards in test_state_store and test_audit_deep), every cell in the full tier; STATEOPS_MATRIX_CELLS
# (cell names, comma-separated) picks some to run while working on one.
RUN = (tuple(os.environ["STATEOPS_MATRIX_CELLS"].split(",")) if os.environ.get("STATEOPS_MATRIX_CELLS")
       else tuple(CELLS) if FULL else ("format2_changelog",))


def build_matrix(spark: SparkSession, root: Path, cells: tuple[str, ...] = RUN) -> dict[str, str]:
    """Every cell's checkpoint (three batches of the same input, a user with many actions among them)."""
    folder = root / "input"
    hot = [dict(e, user_id="hot", action=f"a{k % 3}") for k, e in enumerate(events(0, 120))]
    write_batches(folder, [hot + events(0, 200), events(1, 200), events(2, 200)])
    built = {}
    for name in cells:
        settings, query = CELLS[name]
        frame, mode = query(spark, folder)
        built[name] = with_conf(spark, settings, lambda: run_bounded(frame, str(root / "cp" / name), mode))
    return built
