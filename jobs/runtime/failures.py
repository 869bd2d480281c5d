"""A failed query told in one line, with the full trace kept in the run's log (ops/<job>/logs/<run>.log).

Spark wraps the real error (e.g. CANNOT_LOAD_STATE_STORE) in STREAM_FAILED and, through foreachBatch, in
FOREACH_BATCH_USER_FUNCTION_ERROR, and appends a page of query plan. The line names the job, the query,
the batch, the innermost error class with the first line of its message and its root cause, what to do,
and the log file.
"""
from __future__ import annotations

import re
import traceback
from datetime import datetime, timezone

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.storage import append_text, write_text
from stateops.layout import Layout
from stateops.redaction import redact

WRAPPERS = ("STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR")
# A lookahead, so that a class quoted on its wrapper's line (`[STREAM_FAILED] ... exception: [INNER] ...`) is found too
_ERROR_CLASS = re.compile(r"(?=\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\] *([^\n]*))")
_CAUSED_BY = re.compile(r"^Caused by: (.+)$", re.MULTILINE)
_PYTHON_ERROR = re.compile(r"^((?:\w+\.)*\w*(?:Error|Exception): .+)$", re.MULTILINE)
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")

CHANGED_QUERY = ("STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
                 "STATE_STORE_INVALID_AVRO_SCHEMA", "STATE_SCHEMA_", "STREAMING_STATEFUL_OPERATOR_NOT_MATCH",
                 "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY")
CHANGED_QUERY_ADVICE = ("the query changed in a way its checkpoint's state cannot take (its stateful operators, or "
                        "their key or value columns): run `stateops recover run {job} --mode rebuild --confirm {job}`, "
                        "which archives the old checkpoint and replays the input into a fresh one (`stateops jobs "
                        "check {job}` shows what changed and what the rebuild would replay)")
STATE_ADVICE = ("the checkpoint's state does not load (corrupt or missing files): delete nothing; inspect it with "
                "`stateops audit {job} --fast`, then restore an archive (`stateops archives list {job}`, `stateops "
                "recover run {job} --mode restore --archive ID --confirm {job}`) or rebuild the state from the input "
                "(`stateops recover run {job} --mode rebuild --confirm {job}`)")
ADVICE = (  # the first match wins
    (CHANGED_QUERY, CHANGED_QUERY_ADVICE),
    (("CANNOT_LOAD_STATE_STORE", "STATE_STORE_", "STREAMING_STATEFUL_OPERATOR_"), STATE_ADVICE),
)
DEFAULT_ADVICE = ("fix the cause shown in the log, then run `stateops jobs run {job}` again: the query resumes "
                  "from its last committed batch")


# Failures of the machine, not of the query or its state: run again at once, the query resumes from its last committed
# batch. Spark waits a fixed 10 s (PythonWorkerFactory.createSimpleWorker, not configurable in 4.2) for the Python
# process that transformWithStateInPandas starts on the driver to plan each run's first batch; on a loaded machine
# its start takes longer (the fleet soak: four runs in a row of the user's job failed so, at a load average of 40).
TRANSIENT = ("Python worker failed to connect back",)


class QueryFailed(Exception):
    """A job's query stopped with an error; str() is the one line an operator reads."""

    def __init__(self, job: str, query: str, batch_id: int, error_class: str, message: str, advice: str,
                 log_path: str):
        self.job, self.query, self.batch_id, self.error_class = job, query, batch_id, error_class
        self.message, self.advice, self.log_path = message, advice, log_path
        line = (f"{job}: query {query} failed in batch {batch_id} with {error_class}: {message}. "
                f"What to do: {advice}. Full trace: {log_path}")
        super().__init__(redact(" ".join(line.split())))

    @property
    def transient(self) -> bool:
        """A failure of the machine (TRANSIENT), which the run retries in place."""
        return any(text in self.message or text in self.error_class for text in TRANSIENT)


def _text(err: BaseException) -> str:
    """The error's message without the query plan Spark appends (the nested message when Spark has one)."""
    nested = (getattr(err, "getMessageParameters", lambda: None)() or {}).get("message")
    return nested or str(err).split("\n=== Streaming Query ===")[0]


def spark_error(err: BaseException) -> tuple[str, str]:
    """(error class, message) of the innermost Spark error in `err`: the class Spark names, the first line of
    its message, and the root cause (the last `Caused by`, else the last Python exception line)."""
    text = _text(err)
    found = _ERROR_CLASS.findall(text)
    inner = [f for f in found if f[0] not in WRAPPERS] or [f for f in found if f[0] != WRAPPERS[0]]
    outer = getattr(err, "getCondition", lambda: None)() or type(err).__name__
    error_class, first = inner[0] if inner else (outer, (text.strip().splitlines() or [""])[0])
    first = _SQLSTATE.sub("", first.split(" Reason: ")[0]).strip()
    causes = _CAUSED_BY.findall(text) or _PYTHON_ERROR.findall(text)
    cause = causes[-1].strip() if causes else ""
    return error_class, first + (f" (root cause: {cause})" if cause and cause not in first else "")


def failed_batch(checkpoint: str) -> int:
    """The batch being run when the query failed: the last planned one, or the one after the last commit."""
    cp = Checkpoint(checkpoint)
    committed = cp.committed_batches()
    return max(cp.offset_batches()[-1:] + [committed[-1] + 1 if committed else 0])


def write_log(path: str, text: str) -> None:
    """Append to the run's log (it may already hold Spark's console output); write anew where no append."""
    try:
        append_text(path, text)
    except (NotImplementedError, ValueError):
        write_text(path, text)


def query_failed(err: BaseException, *, layout: Layout, job: str, query: str, checkpoint: str,
                 run_id: str) -> QueryFailed:
    """Record `err` in the run's log and describe it in one line."""
    error_class, message = spark_error(err)
    advice = next((text for prefixes, text in ADVICE if error_class.startswith(prefixes)), DEFAULT_ADVICE)
    log_path = layout.run_log(job, run_id)
    failure = QueryFailed(job, query, failed_batch(checkpoint), error_class, message, advice.format(job=job),
                          log_path)
    trace = "".join(traceback.format_exception(err))
    nested = _text(err)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_log(log_path, redact(f"\n{stamp} {failure}\n\n{trace}\n" + ("" if nested in trace else f"{nested}\n")))
    return failure
