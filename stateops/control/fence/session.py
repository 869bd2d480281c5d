"""StateOps' own JVM jar, shipped in the package (built from jvm/fence by scripts/build-fence-jar): create-once commit
points for Spark's checkpoints and Delta's log, and the Spark settings that put them in force, as data.

Spark writes a checkpoint's commit points (`offsets/N`, `commits/N`, `metadata`, schema files) and Delta its commits
(`_delta_log/N.json`) by checking that the name is free and then renaming or PUTting: two writers can both pass the
check, and the later one replaces the earlier one's file. The job's lease keeps one writer at a time, but a driver
that lost its lease during a freeze and then resumes does not know it yet. With these classes each commit point is
created once, atomically in the store (a hard link on a local disk, a conditional PUT on S3 through S3A): the stale
writer's write fails and its query stops, and nothing the live writer committed is replaced.

Standard library only (the session factory's settings are built without a JVM).
"""
from __future__ import annotations

import os

from stateops import jvm

FENCE_JAR = os.path.join(os.path.dirname(os.path.abspath(jvm.__file__)), "stateops-fence.jar")
CHECKPOINT_FILE_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
CHECKPOINT_FILE_MANAGER = "io.stateops.fence.CreateOnceCheckpointFileManager"
LOG_STORE = "io.stateops.fence.CreateOnceLogStore"
# Delta's log store per URL scheme of the tables StateOps writes with Delta's Spark writer: local disk, and S3 through
# S3A (s3:// is mapped to S3A too, stateops.storage.s3a_conf). Delta reads these when the session starts.
LOG_STORE_KEYS = ("spark.delta.logStore.file.impl", "spark.delta.logStore.s3a.impl", "spark.delta.logStore.s3.impl")
# With the fence off (stateops.faults `fence.off`, the negative control of the fence tests): what Spark and Delta
# write with by default, the checks-then-renames that create-once replaces (on S3 Delta's default is its
# single-driver store, and the renaming manager Spark's fallback).
STOCK_CHECKPOINT_FILE_MANAGER = \
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
STOCK_LOG_STORES = {LOG_STORE_KEYS[0]: "io.delta.storage.LocalLogStore"}


def fence_conf(delta: bool, off: bool = False) -> dict[str, str]:
    """The Spark settings that make commit points create-once (with FENCE_JAR on `spark.jars`): the checkpoint file
    manager always, and Delta's log store for each scheme when `delta` (Delta's jars are on the classpath). `off`:
    the stock writers instead."""
    if off:
        return {CHECKPOINT_FILE_MANAGER_KEY: STOCK_CHECKPOINT_FILE_MANAGER, **(STOCK_LOG_STORES if delta else {})}
    conf = {CHECKPOINT_FILE_MANAGER_KEY: CHECKPOINT_FILE_MANAGER}
    if delta:
        conf.update({key: LOG_STORE for key in LOG_STORE_KEYS})
    return conf
