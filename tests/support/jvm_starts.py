"""The JIT of the JVMs the tests start: full for the test process's own Spark session, C1 only for the rest.

A test process keeps one in-process Spark session for hundreds of tests: its long-lived work needs C2 (tried
with C1 only for every JVM of a run: that work took up to 2.5x longer). The JVMs a test starts as separate
processes (`stateops jobs run` to kill, CLI runs, Dagster's run workers) live for seconds to a minute and
spend much of it compiling: one `stateops jobs run user_activity` over 300 events took 34 CPU seconds with the
default JIT and 22 with `-XX:TieredStopAtLevel=1` (measured twice each on this 2-core machine, wall 19.6 s ->
15.6 s). `use_c1_for_started_jvms()` puts the flag into the environment every child inherits (spark-submit
reads SPARK_SUBMIT_OPTS) and makes PySpark launch this process's own JVM without it.
"""
from __future__ import annotations

import contextlib
import os

C1_ONLY = "-XX:TieredStopAtLevel=1"
OPTS = "SPARK_SUBMIT_OPTS"


@contextlib.contextmanager
def _full_jit():
    """The environment without the C1 flag while this process launches its own JVM."""
    before = os.environ.get(OPTS)
    rest = " ".join(part for part in (before or "").split() if part != C1_ONLY)
    if rest:
        os.environ[OPTS] = rest
    else:
        os.environ.pop(OPTS, None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(OPTS, None)
        else:
            os.environ[OPTS] = before


def use_c1_for_started_jvms() -> None:
    """C1 only for the JVMs this process starts as children; its own session's JVM keeps the full JIT."""
    from pyspark.core import context

    parts = os.environ.get(OPTS, "").split()
    if C1_ONLY not in parts:
        os.environ[OPTS] = " ".join([*parts, C1_ONLY])
    launch = context.launch_gateway
    if getattr(launch, "full_jit", False):
        return

    def launch_gateway(*args, **kwargs):
        with _full_jit():
            return launch(*args, **kwargs)

    launch_gateway.full_jit = True
    context.launch_gateway = launch_gateway
