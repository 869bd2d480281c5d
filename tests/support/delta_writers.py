"""The Delta writer in force for a test: delta-rs from the driver or Delta's own Spark writer (stateops.jobs.runtime.session)."""
from __future__ import annotations

import contextlib
import os

import pytest


def spark_writer_available() -> bool:
    """Delta's Spark jars are in .jars/spark (scripts/setup fetched them with Maven)."""
    from stateops.jobs.runtime.session import project_jars

    return any("delta-spark" in os.path.basename(j) for j in project_jars())


@contextlib.contextmanager
def delta_writer_in_force(spark, writer: str):
    """Jobs run by this session and the `stateops` processes a test starts write Delta with `writer`
    (stateops.jobs.runtime.session: `delta-rs`, or Delta's own Spark writer); skips `spark` without its jars."""
    from stateops.jobs.runtime.session import DELTA_WRITER_CONF

    if writer == "spark" and not spark_writer_available():
        pytest.skip("Delta's Spark jars are missing (.jars/spark): install Maven 3.8+ and run bash scripts/setup")
    before_conf, before_env = spark.conf.get(DELTA_WRITER_CONF, "delta-rs"), os.environ.get("STATEOPS_DELTA_WRITER")
    spark.conf.set(DELTA_WRITER_CONF, writer)
    os.environ["STATEOPS_DELTA_WRITER"] = writer
    try:
        yield writer
    finally:
        spark.conf.set(DELTA_WRITER_CONF, before_conf)
        if before_env is None:
            os.environ.pop("STATEOPS_DELTA_WRITER", None)
        else:
            os.environ["STATEOPS_DELTA_WRITER"] = before_env


def spark_writer_in_long_tier(fixture: str = "delta_writer"):
    """Runs the test on delta-rs in the default run and on Delta's Spark writer in the long tier only: for a test
    whose contract on the Spark writer another default-run test guards (docs/testing.md names which)."""
    return pytest.mark.parametrize(fixture, ["delta-rs", pytest.param("spark", marks=pytest.mark.long)],
                                   indirect=True)
