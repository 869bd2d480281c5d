"""The one place that builds Spark sessions: local by default, any master by configuration.

Environment:
  STATEOPS_SPARK_MASTER   master URL (default local[*]); e.g. spark://host:7077
  STATEOPS_SPARK_CONF     JSON object of extra Spark settings
  STATEOPS_DELTA_WRITER   who writes the jobs' Delta output: `auto` (default: delta-rs on a local master, Delta's
                          Spark writer on a cluster), `delta-rs` (from the driver) or `spark` (Delta's own Spark
                          writer, executor-side; needs the delta-spark jars)
  STATEOPS_JARS           the folder of the pinned JVM jars (default: a per-user cache folder, stateops.jvm.jars)
The factory never downloads anything at session start: `spark.jars.packages` is refused, and so is a URL
or Maven coordinate in `spark.jars`, `spark.files`, `spark.pyFiles` or `spark.archives`. The jars that
`stateops jars fetch` fetched with Maven (Delta's Spark writer, the Kafka connector, S3A) and StateOps' own jar
(the fence's create-once commit points, stateops.control.fence.session, shipped in the package, so always there) are
passed as `spark.jars`, ahead of any the user lists.
"""
from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from typing import Any, Iterator

from stateops.errors import ConfigError, StateOpsError
from stateops.faults import fence_off
from stateops.control.fence.session import FENCE_JAR, fence_conf
from stateops.redaction import SPARK_REDACTION_REGEX, redact_fd
from stateops.checkpoints.state_store import CHANGELOG, PROVIDER, ROCKSDB_PROVIDER
from stateops.storage import is_url, s3a_conf

from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.runtime.python_workers import install, worker_python

# PySpark's own pandas code (pandas UDFs, applyInPandasWithState) warns about a pandas deprecation once per
# batch and task, hundreds of lines per run; the Python workers ignore that module's FutureWarnings only.
WORKER_WARNINGS = "ignore::FutureWarning:pyspark.sql.pandas.serializers"
# Off, RocksDB skips a read before each state write (docs/design.md: user_activity about 19% faster) and
# every operator's numRowsTotal reads 0: StateOps then records the state's row counts as unknown
# (stateops.jobs.runtime.listener), never as an empty state.
TRACK_ROWS = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"
# A job's query is scheduled before the session's other work (jobs/runtime/scheduler_pools.xml).
SCHEDULER_POOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scheduler_pools.xml")
STATEFUL_POOL = "stateful"
FETCHED_AT_START = ("spark.jars", "spark.files", "spark.pyFiles", "spark.archives")
# http(s)/ftp URLs, Ivy URIs, and bare Maven coordinates (group:artifact:version) are downloaded.
_DOWNLOAD = re.compile(r"^\s*(?:(?:https?|ftp|ivy)://|[\w.-]+:[\w.-]+:[\w.-]+\s*$)", re.IGNORECASE)
DELTA_WRITER_CONF = "spark.stateops.deltaWriter"  # the session's choice, read back by stateops.jobs.runtime.runner
# Delta 4.4 rebuilds a table's snapshot state (to read `txnVersion`) at every idempotent commit, with this many
# tasks (default 50: a 50-task Spark job per micro-batch). One on a local master: user_activity's micro-batch on
# Delta's Spark writer 7.4 s -> 2.8 s at 20,000 events with one per core, 1.6 -> 1.3 s with one (BENCHMARKS.md);
# on a cluster one per executor core when the session starts, at most Delta's 50 (a 20,000-row commit on the
# 2-worker test cluster, steady state: 2.0-2.6 s with 2, 2.8-3.1 s with 8). STATEOPS_SPARK_CONF sets another.
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
# Stream-stream joins keep their state in format 4 on new checkpoints (Spark 4.2: keys carry the event time, and
# eviction range-scans a time index instead of reading every row: order_payments' micro-batch about 0.56x of format
# 2's, BENCHMARKS.md, Throughput). Spark reads a checkpoint's format from its offset log, so an existing checkpoint
# keeps its own; 4.2 still gates the format behind a switch every session that runs or reads such state needs.
JOIN_STATE_FORMAT = "spark.sql.streaming.join.stateFormatVersion"
JOIN_STATE_FORMAT_CONF = {JOIN_STATE_FORMAT: "4", "spark.sql.streaming.join.stateFormatV4.enabled": "true"}
DELTA_SNAPSHOT_PARTITIONS = 50
# A checkpoint's commit points (offsets/N, commits/N, metadata, schema files) and Delta's commits
# (_delta_log/N.json) are create-once (stateops.control.fence.session): a hard link on a local disk, a conditional
# PUT on S3 through S3A. Spark's and Delta's stock writers check that the name is free, then rename or PUT, so a
# stale writer (a driver that lost the job's lease during a freeze and resumes) could replace what the live one
# committed; now its write fails and its query stops. The manager extends Spark's FileSystem-based one, which writes
# the state store files as before, renamed in-process: through Hadoop's FileContext (Spark's default) a rename on a
# local disk forks `readlink` (and `chmod`) for every file, 40% of a micro-batch of the noop floor (BENCHMARKS.md,
# Delta sink). Delta's log store is set for file:, s3a: and s3: (instead of LocalLogStore and the S3 single-driver
# store) when Delta's jars are there.


def delta_jars_on_classpath(conf: dict) -> bool:
    """True when delta-spark jars are already present (spark.jars or the Spark installation's jars)."""
    jars = conf.get("spark.jars", "")
    if any("delta-spark" in jar for jar in jars.split(",")):
        return True
    found = importlib.util.find_spec("pyspark")  # where pyspark is, without importing it (reading commands)
    homes = {os.environ.get("SPARK_HOME", ""), os.path.dirname(found.origin) if found and found.origin else ""}
    return any(glob.glob(os.path.join(home, "jars", "delta-spark*.jar")) for home in homes if home)


def spark_conf(settings: SparkSettings) -> dict[str, str]:
    """Every setting the factory applies, as data (printable, testable without a JVM)."""
    conf = {
        "spark.master": settings.master,
        "spark.app.name": settings.app_name,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        PROVIDER: ROCKSDB_PROVIDER,  # a new checkpoint's, unless the job or a rebuild says otherwise (state_store)
        CHANGELOG: "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": worker_python(settings.master),  # stateops.jobs.runtime.python_workers
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYTHONWARNINGS": WORKER_WARNINGS,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.metricsEnabled": "false",
        "spark.driver.memory": "2g",
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": SCHEDULER_POOLS,
        # Spark masks the settings and data-source options whose key or value matches, in its UI, event logs and
        # plans: its default terms, plus those of Kafka's SASL settings (stateops.redaction).
        "spark.redaction.regex": SPARK_REDACTION_REGEX,
        **JOIN_STATE_FORMAT_CONF,
    }
    conf.update({str(k): str(v) for k, v in settings.extra_conf.items()})
    jars = settings.jars.jars() + [FENCE_JAR]
    conf["spark.jars"] = ",".join(jars + [j for j in conf.get("spark.jars", "").split(",") if j.strip()])
    if conf.get("spark.jars.packages"):
        raise ConfigError("STATEOPS_SPARK_CONF.spark.jars.packages", "would download jars at session start",
                          "put the jars on the classpath instead (spark.jars or $SPARK_HOME/jars)")
    for key in FETCHED_AT_START:
        remote = [entry for entry in conf.get(key, "").split(",") if _DOWNLOAD.match(entry)]
        if remote:
            raise ConfigError(f"STATEOPS_SPARK_CONF.{key}", f"{remote[0].strip()!r} would be downloaded at "
                              "session start", "download it once yourself and list the local path (or a path "
                              "on the cluster's storage: hdfs://, s3a://, local:)")
    for key, value in s3a_conf(os.environ).items():
        conf.setdefault(key, value)  # STATEOPS_SPARK_CONF wins
    spark_jars = delta_jars_on_classpath(conf)
    for key, value in fence_conf(delta=spark_jars, off=fence_off()).items():
        conf.setdefault(key, value)  # STATEOPS_SPARK_CONF wins
    if spark_jars:
        conf.setdefault("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        conf.setdefault("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        if settings.local:
            conf.setdefault(SNAPSHOT_PARTITIONS, "1")
    elif settings.delta_writer == "spark":
        raise ConfigError("STATEOPS_DELTA_WRITER", "is spark, but the delta-spark jars are not on the classpath",
                          f"run `stateops jars fetch` (it fetches them with Maven into {settings.jars.path}), or "
                          "add them to spark.jars / $SPARK_HOME/jars, or use delta-rs")
    conf[DELTA_WRITER_CONF] = settings.writer_in_force(spark_jars)[0]
    return conf


def delta_writer_in_force(settings: SparkSettings) -> tuple[str, str]:
    """The Delta writer a session made from `settings` uses, and why (`stateops jobs describe`); no JVM."""
    jars = ",".join(settings.jars.jars() + [str(settings.extra_conf.get("spark.jars", ""))])
    return settings.writer_in_force(delta_jars_on_classpath({"spark.jars": jars}))


def join_state_format_in_force(settings: SparkSettings, checkpoint: str) -> dict[str, object]:
    """The state format a stream-stream join's checkpoint runs with, and why (`stateops jobs describe`): the one its
    offset log records (Spark keeps it for the checkpoint's life; a rebuild makes a new checkpoint), else the one a new
    checkpoint gets from this session. No JVM."""
    from stateops.checkpoints.checkpoint import Checkpoint
    from stateops.checkpoints.sparkstate import join_state_format

    try:
        found = Checkpoint.open(checkpoint)
        batches = found.offset_batches()
        if batches:
            return {"value": join_state_format(found.batch_metadata(batches[-1]).get("conf", {})),
                    "source": f"the checkpoint's offset log (batch {batches[-1]}); a rebuild keeps it unless "
                              "STATEOPS_SPARK_CONF sets another"}
    except (StateOpsError, OSError, ValueError):
        pass
    value = settings.extra_conf.get(JOIN_STATE_FORMAT, JOIN_STATE_FORMAT_CONF[JOIN_STATE_FORMAT])
    return {"value": int(value), "source": "a new checkpoint's, from the session" + (
        " (STATEOPS_SPARK_CONF)" if JOIN_STATE_FORMAT in settings.extra_conf else "")}


def check_java() -> None:
    """Fail early, with the fix, when no usable Java is on this machine."""
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    if not java or not os.path.exists(java):
        raise StateOpsError("Java 17 is required to run Spark and was not found: install it "
                            "(Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(match.group(1)) if match else 0
    if major == 1 and match.group(2):
        major = int(match.group(2))  # "1.8.0" style
    if major < 17:
        first = out.splitlines()[0] if out else "no version"
        raise StateOpsError(f"Spark 4 needs Java 17 or newer; {java} reports: {first}. "
                            "Install openjdk-17 and set JAVA_HOME")


@contextlib.contextmanager
def _console_to(path: str | None) -> Iterator[None]:
    """Point this process's stderr at `path` (default: where it points) through the redaction relay while the
    block runs (stateops.redaction.redact_fd): a JVM started inside inherits it, so Spark's console log (and its
    Python workers' stderr) reaches it redacted for the JVM's lifetime."""
    from pyspark import SparkContext

    if SparkContext._gateway is not None:  # no JVM will start here
        yield
        return
    if path is not None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    undo = redact_fd(2, open(path, "a") if path is not None else None)
    try:
        yield
    finally:
        undo()


def console_log_for(log: str) -> str:
    """The local file for the JVM's console output of a run whose log is `log`: `log` itself on local disk; for a
    home on object storage (a JVM appends to a local file, never to an object) the same path under the per-user
    cache folder, $XDG_CACHE_HOME (else ~/.cache)/stateops/logs/<bucket>/<key>, so the terminal still shows only
    StateOps' own lines (a query that fails after a lost lease logs Spark's trace there, not on the terminal)."""
    if not is_url(log):
        return log
    scheme, rest = log.split("://", 1)
    if scheme == "file":
        return rest
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "stateops", "logs", scheme, rest)


def get_session(settings: SparkSettings, console_log: str | None = None):
    """The process's Spark session, created with `settings` (the entry point's) on first use.

    console_log: a local file for the JVM's console output when this call starts the JVM (the CLI keeps
    the terminal for its own lines); by default this process's stderr. Either way redacted (_console_to).
    """
    from pyspark.sql import SparkSession

    conf = spark_conf(settings)
    if conf["spark.pyspark.python"] == worker_python(settings.master) and not install(conf["spark.pyspark.python"]):
        conf["spark.pyspark.python"] = sys.executable  # the launcher cannot be written: the interpreter itself
    os.environ.setdefault("PYSPARK_PYTHON", conf["spark.pyspark.python"])  # what pyspark's functions carry
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if SparkSession.getActiveSession() is None:
        check_java()
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    with _console_to(console_log):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if conf.get("spark.sql.extensions") and SNAPSHOT_PARTITIONS not in conf:  # a cluster master
        cores = spark.sparkContext.defaultParallelism
        spark.conf.set(SNAPSHOT_PARTITIONS, str(max(1, min(DELTA_SNAPSHOT_PARTITIONS, cores))))
    return spark


def session_of(spark: Any):
    """A session given, or made now by the factory given (a callable): callers that may wait for a lease or
    a plan pass the factory, so a JVM starts only when a step needs it (minutes on a loaded machine)."""
    if callable(spark) and not hasattr(spark, "sparkContext"):
        return spark()
    return spark


def state_rows_tracked(spark) -> bool:
    """Whether the session's RocksDB state stores count their rows (numRowsTotal): on, unless the user set
    TRACK_ROWS to false in STATEOPS_SPARK_CONF."""
    return spark.conf.get(TRACK_ROWS, "true").strip().lower() != "false"
