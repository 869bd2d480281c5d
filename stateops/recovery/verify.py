"""Is the restarted query healthy? Pure checks over what the executor observed (progress rows of the restarted
run, audits from the state reader, the sink's keys); each check says what it saw.

    restart      the run did not fail (a bounded run returned; a long-running one still holds its lease)
    batches      K batches with input completed, or the restarted query read every available input
                 (`caught_up`: it is running, reported itself idle after its latest batch, and its source
                 has nothing it has not read), or a bounded restart ended at the end of its input
    first_batch  rewind: the first batch after the restart is N+1
    watermark    never behind where the restart started, and ahead of it once a batch read event times
                 beyond start + delay (one input; with several the global watermark is their minimum)
    state_rows   per operator and store: rows <= rows at the restart + input rows since (a row of input adds
                 at most one row to a store), from a deep audit
    partitions   counted from the state files (state-metadata keeps the count an operator was created with)
    sink_keys    no key of the sink table (merge keys or idempotent key) occurs twice
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Reading:
    """What the executor saw of a long-running restart's reading of its input, at one moment.

    On a quiet stream the restarted query runs no batch, so its progress rows cannot say it is alive and
    has looked at its source; the checkpoint still shows what the previous run read. Spark's own word is
    the QueryIdleEvent: a trigger asked the source for new data and found none (Spark posts one every
    spark.sql.streaming.noDataProgressEventInterval, 10 s, while the query stays idle); the run records
    the latest one per query (stateops.progress.idle_report) with the batch it had completed by then.
    """
    running: bool                   # the restarted run holds the job's live lease
    start_batch: int | None         # the checkpoint's latest committed batch at the restart (None: none)
    committed: int | None           # its latest committed batch now
    planned: int | None             # its latest planned batch (offsets/) now
    idle_at: str | None             # the restarted query's latest idle report (None: none since the restart)
    idle_after: int | None          # the batch it had completed then (None: none since the restart)
    # Available input the checkpoint has not read (file sources: landed files not in its source logs; Kafka:
    # partitions with records past its latest batch's offsets); None: cannot say (no batch yet, no broker).
    unread: tuple[str, ...] | None


def caught_up(reading: Reading) -> tuple[bool, str]:
    """Has the restarted query read every available input? (verdict, what was seen, in words)

    Yes when it runs, its latest idle report came after its latest batch (so it looked at its source
    after the restart, and again after every batch since), no batch is planned and not committed, and the
    source has nothing the checkpoint has not read (input that landed after the idle report). Input
    that keeps flowing never lets the query go idle: verification then waits for its K batches.
    """
    latest = reading.committed if reading.committed is not None and (
        reading.start_batch is None or reading.committed > reading.start_batch) else None
    if not reading.running:
        return False, "the restarted run does not hold the job's lease"
    if reading.idle_at is None:
        return False, "the restarted query has not reported itself idle since the restart"
    if reading.idle_after != latest:
        return False, f"the restarted query completed batch {latest} after it last reported itself idle"
    if reading.planned != reading.committed:
        return False, f"batch {reading.planned} is planned and not committed yet"
    if reading.unread is None:
        return False, "the job's source cannot tell which input is available"
    if reading.unread:
        return False, f"{len(reading.unread)} available inputs are not read yet, e.g. {reading.unread[0]}"
    since = "with no batch since the restart" if latest is None else f"after batch {latest}"
    return True, (f"the restarted query is running and has read every available input (idle since "
                  f"{reading.idle_at}, {since})")


def _stores(audit: dict[str, Any] | None) -> dict[str, int]:
    if not audit:
        return {}
    return {f"{op['operator_id']}/{op['store_name']}": op["rows_total"] or 0 for op in audit["operators"]}


def evaluate(*, error: str | None, progress: list[dict[str, Any]], batches_wanted: int, caught_up: bool,
             start_watermark_ms: int, end_watermark_ms: int, delay_ms: int, single_watermark: bool,
             first_batch: int | None, audit_start: dict[str, Any] | None, audit_after: dict[str, Any] | None,
             expected_partitions: int | None, duplicates: tuple[int, list[dict[str, Any]]],
             timed_out: bool = False, reading: str | None = None) -> dict[str, Any]:
    """{"ok", "checks": [{name, ok, detail}]} for the restart described by the arguments.

    progress: the restarted run's progress rows of the stateful query (batch_id, input_rows,
    event_time_max_ms), oldest first. audit_start: the state the restart began from (None: empty).
    caught_up: the restart read every available input. reading: what the executor saw of a long-running
    restart's reading (`caught_up()`'s words); None for a bounded restart, which ran to the end of its input.
    """
    checks = [Check("restart", error is None, error or "the restarted run did not fail")]
    with_input = [p for p in progress if p["input_rows"]]
    enough = len(with_input) >= batches_wanted
    detail = f"{len(with_input)} batches with input (wanted {batches_wanted})"
    if not enough and caught_up:
        detail += f"; {reading or 'every available input file is processed'}"
    elif not enough and timed_out and error is None:
        detail += "; no more input arrived within the verification timeout while the query kept running"
        detail += f" ({reading})" if reading else ""
    checks.append(Check("batches", error is None and (enough or caught_up or timed_out), detail))
    if first_batch is not None:
        seen = progress[0]["batch_id"] if progress else None
        checks.append(Check("first_batch", seen == first_batch,
                            f"first batch after the restart: {seen} (expected {first_batch})"))
    newest = max((p["event_time_max_ms"] for p in with_input if p.get("event_time_max_ms") is not None), default=None)
    must_advance = single_watermark and newest is not None and newest - delay_ms > start_watermark_ms
    advanced = end_watermark_ms > start_watermark_ms
    checks.append(Check("watermark", end_watermark_ms >= start_watermark_ms and (advanced or not must_advance),
                        f"watermark {start_watermark_ms} -> {end_watermark_ms} ms"
                        + ("" if must_advance or advanced else " (no input beyond it yet)")))
    if audit_after is not None:
        start, after = _stores(audit_start), _stores(audit_after)
        input_rows = sum(p["input_rows"] for p in progress)
        over = {s: n for s, n in after.items() if n > start.get(s, 0) + input_rows}
        checks.append(Check("state_rows", not over, "; ".join(
            f"{s}: {start.get(s, 0)} -> {n} rows (bound {start.get(s, 0) + input_rows})" for s, n in after.items())))
        counted = {op["operator_id"]: op["num_partitions"] for op in audit_after["operators"]}
        if expected_partitions is not None:
            wrong = {op: n for op, n in counted.items() if n != expected_partitions}
            checks.append(Check("partitions", not wrong, f"state partitions per operator {counted} (expected "
                                f"{expected_partitions}, counted from the state files)"))
    count, examples = duplicates
    checks.append(Check("sink_keys", count == 0, "no duplicate keys in the sink" if not count else
                        f"{count} keys occur more than once, e.g. {examples[:2]}"))
    return {"ok": all(c.ok for c in checks), "checks": [asdict(c) for c in checks]}


def failures(verification: dict[str, Any]) -> str:
    """The failed checks in one line."""
    return "; ".join(f"{c['name']}: {c['detail']}" for c in verification["checks"] if not c["ok"])
