"""One line from a failed query's error text (the shapes Spark 4.2 produced, measured), without a JVM."""
from __future__ import annotations

import pytest

from stateops.jobs.runtime.failures import QueryFailed, query_failed, spark_error
from stateops.layout import Layout

pytestmark = pytest.mark.unit

STATE = """An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/venv/pyspark/sql/utils.py", line 163, in call
py4j.protocol.Py4JJavaError: An error occurred while calling o371.getResult.
: org.apache.spark.SparkException: Exception thrown in awaitResult:
\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:70)
Caused by: org.apache.spark.SparkException: [CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] An error occurred during loading state.  SQLSTATE: 58030
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.cannotLoadStore(QueryExecutionErrors.scala:2846)
Caused by: java.io.EOFException
\tat java.base/java.io.DataInputStream.readUnsignedShort(DataInputStream.java:334)
"""
SINK = """[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/repo/jobs/runtime/sink.py", line 74, in __call__
    result = write_batch(self.table_uri, data, app_id=self.app_id(), batch_id=batch_id,
deltalake.exceptions.CommitFailedError: Transaction failed: version already exists
"""


class CapturedError(Exception):
    """The two accessors PySpark's captured exceptions offer (condition, nested message)."""

    def __init__(self, text: str, nested: str | None, condition: str | None):
        super().__init__(text)
        self.nested, self.condition = nested, condition

    def getMessageParameters(self):
        return {"message": self.nested} if self.nested is not None else None

    def getCondition(self):
        return self.condition


@pytest.mark.parametrize("err,error_class,message", [
    (CapturedError("x", STATE, "STREAM_FAILED"), "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED",
     "An error occurred during loading state. (root cause: java.io.EOFException)"),
    (CapturedError(f"[STREAM_FAILED] Query [id = 1] terminated with exception: {SINK}", SINK, "STREAM_FAILED"),
     "FOREACH_BATCH_USER_FUNCTION_ERROR", "An error occurred in the user provided function in foreach batch sink. "
     "(root cause: deltalake.exceptions.CommitFailedError: Transaction failed: version already exists)"),
    (CapturedError("Wrong basePath /a for the root path: file:/b/x.json\n=== Streaming Query ===\nIdentifier: q\n"
                   "[NOT_A_CLASS_IN_THE_PLAN] x", None, None),
     "CapturedError", "Wrong basePath /a for the root path: file:/b/x.json"),
])
def test_spark_error_names_the_innermost_class_its_first_line_and_the_root_cause(err, error_class, message):
    assert spark_error(err) == (error_class, message)


def test_query_failed_is_one_line_with_advice_and_the_full_trace_in_the_log(tmp_path):
    layout = Layout(str(tmp_path / "home"))
    checkpoint = tmp_path / "home" / "checkpoints" / "user_activity"
    for folder, batches in (("offsets", (0, 1, 2, 3)), ("commits", (0, 1, 2))):
        (checkpoint / folder).mkdir(parents=True)
        for batch in batches:
            (checkpoint / folder / str(batch)).write_text("v1\n")
    failure = query_failed(CapturedError("x", STATE, "STREAM_FAILED"), layout=layout, job="user_activity",
                           query="user_activity", checkpoint=str(checkpoint), run_id="r1")
    line = str(failure)
    assert "\n" not in line and isinstance(failure, QueryFailed)
    assert line.startswith("user_activity: query user_activity failed in batch 3 with "
                           "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED: An error occurred during loading state.")
    assert "What to do:" in line and "`stateops audit user_activity --fast`" in line
    assert line.endswith(f"Full trace: {layout.run_log('user_activity', 'r1')}")
    log = (tmp_path / "home" / "ops" / "user_activity" / "logs" / "r1.log").read_text()
    assert line in log and "Caused by: java.io.EOFException" in log and "CapturedError: x" in log

    other = query_failed(CapturedError("x", SINK, "STREAM_FAILED"), layout=layout, job="user_activity",
                         query="user_activity__deadletter", checkpoint=str(tmp_path / "none"), run_id="r1")
    assert "failed in batch 0" in str(other) and "run `stateops jobs run user_activity` again" in str(other)
    assert log in (tmp_path / "home" / "ops" / "user_activity" / "logs" / "r1.log").read_text()  # appended


SCHEMA = """[STREAM_FAILED] Query [id = 1] terminated with exception: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing state key schema.
Please check number and type of fields.
Existing key_schema=StructType(StructField(event_id,StringType,true)) and new key_schema=StructType(StructField(event_id,StringType,true),StructField(user_id,StringType,true)). SQLSTATE: XXKST"""


@pytest.mark.parametrize("text", [
    SCHEMA,
    SCHEMA.replace("STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"),
])
def test_a_changed_query_spark_refuses_at_its_first_batch_gets_the_rebuild_advice(tmp_path, text):
    """Where the check before the run could not decide, Spark's own refusal names the same fix."""
    layout = Layout(str(tmp_path / "home"))
    failure = query_failed(CapturedError(text, None, "STREAM_FAILED"), layout=layout, job="clicks", query="clicks",
                           checkpoint=str(tmp_path / "none"), run_id="r1")
    assert "`stateops recover run clicks --mode rebuild --confirm clicks`" in str(failure)
    assert "`stateops jobs check clicks`" in str(failure)


# Measured in the fleet soak (the user's job, transformWithStateInPandas, at a load average of 40 on 2 cores).
WORKER = """Python worker failed to connect back.
=== Streaming Query ===
Identifier: user_engagement [id = 16982470-7521-44ce-ae31-84ab7719ff3d, runId = a6ad2950-672f-4f43-97e5-3404cb5c781d]
"""


@pytest.mark.parametrize("text, transient", [(WORKER, True), (STATE, False), (SINK, False)])
def test_only_a_failure_of_the_machine_is_transient(text, transient):
    """A transient failure the run retries in place (stateops.jobs.runtime.runner); a state or sink failure is not."""
    error_class, message = spark_error(CapturedError(text, None, None))
    failed = QueryFailed("user_engagement", "user_engagement", 55, error_class, message, "advice", "log")
    assert failed.transient is transient
