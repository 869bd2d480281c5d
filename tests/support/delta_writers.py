"""The Delta writer in force for a test: delta-rs from the driver or Delta's own Spark writer (stateops.jobs.runtime.session)."""
from __future__ import annotations

import contextlib
import os

import pytest


MISSING_JARS = ("Delta's Spark jars are missing: install Maven 3.8+ and run bash scripts/setup (it runs `stateops jars "
                "fetch`)")


def spark_writer_available() -> bool:
    """Delta's Spark jars are where sessions look for them (`stateops jars fetch`, run by scripts/setup)."""
    from stateops.jvm.jars import JarsFolder

    return any("delta-spark" in os.path.basename(j) for j in JarsFolder.of().jars())


@contextlib.contextmanager
def delta_writer_in_force(spark, writer: str):
    """Jobs run by this session and the `stateops` processes a test starts write Delta with `writer`
    (stateops.jobs.runtime.session: `delta-rs`, or Delta's own Spark writer); skips `spark` without its jars."""
    from stateops.jobs.runtime.session import DELTA_WRITER_CONF

    if writer == "spark" and not spark_writer_available():
        pytest.skip(MISSING_JARS)
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
