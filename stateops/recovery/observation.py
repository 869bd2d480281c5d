"""Watching the restarted run and judging it: the verification a runbook ends with (the forward `verify` step and
the rollback's `rollback_verify`), and what a run has read so far (`observe_reading`, also the bare side's health
in bench/bench_recovery_live.py).

Apart from the steps that change things (steps.py, rollback.py): everything here only reads (the job's lease,
the progress ops table, the checkpoint, the landing folders, the restarted process's log) and waits, and
verify.py turns what was seen into the verdict.
"""
from __future__ import annotations

import time
from typing import Any

from stateops import sinkstate
from stateops.checkpoints import kafka_offsets
from stateops import progress as progress_table
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import overrides
from stateops.storage.holders import alive
from stateops.delta import read_table
from stateops.durations import parse_seconds
from stateops.errors import StateOpsError
from stateops.layout import Layout

from stateops.recovery import coverage, verify
from stateops.recovery.attempt import AttemptView
from stateops.recovery.target import JobTarget


def verification(attempt: AttemptView, restart: dict[str, Any], start_audit: dict | None,
                 expected_partitions: int | None, first_batch: int | None) -> dict[str, Any]:
    """Watch the run a restart step started (`restart`: its journaled details) and judge it (verify.evaluate)
    against `start_audit`, the state it started from: {"verification", "audit_after"}."""
    target, settings = attempt.target, attempt.settings
    seen = _observe(attempt, restart)
    error, progress = seen["error"], seen["progress"]
    checkpoint = Checkpoint.open(target.checkpoint)
    audited = checkpoint.latest_committed_batch()
    audit_after = None
    if error is None:
        # A long-running restart goes on while this looks: audit one committed batch and judge it by the
        # progress of exactly the batches up to it (a later batch's input would be missing from the bound).
        audit_after = attempt.audit(target.checkpoint, audited)
        if seen["run_id"]:
            progress = _progress_through(attempt, seen["run_id"], audited, restart.get("latest_committed_batch"))
    end = checkpoint.next_watermark_ms(audited)
    delay = parse_seconds(overrides.validate(target.job, overrides.WATERMARK_DELAY,
                                             attempt.plan.settings_after["watermark_delay"], target.bounds))
    result = verify.evaluate(
        error=error, progress=progress, batches_wanted=settings.verify_batches, caught_up=seen["caught_up"],
        reading=seen["reading"],
        start_watermark_ms=restart["watermark_ms"], end_watermark_ms=end, delay_ms=delay * 1000,
        single_watermark=target.inputs == 1, first_batch=first_batch, audit_start=start_audit,
        audit_after=audit_after, expected_partitions=expected_partitions,
        duplicates=sinkstate.duplicate_keys(target.sink_table, target.row_key),
        timed_out=seen["timed_out"])
    result.update(run_id=seen["run_id"], progress=progress, caught_up=seen["caught_up"],
                  timed_out=seen["timed_out"])
    return {"verification": result, "audit_after": audit_after}


def audited_partitions(audit: dict | None) -> int | None:
    """The state partitions an audit found, when all its operators agree (None otherwise)."""
    counts = {op["num_partitions"] for op in (audit or {}).get("operators", [])}
    return counts.pop() if len(counts) == 1 else None


def _observe(attempt: AttemptView, restart: dict[str, Any]) -> dict[str, Any]:
    """How the restarted run went: error, run id, its progress rows, caught up (it read every available
    input; `reading` says what was seen), timed out. A long-running restart is watched until it completed
    K batches with input or caught up (a quiet stream), or the verification timeout."""
    if restart["how"] == "bounded":
        return {"error": None, "run_id": restart["run_id"], "progress": _progress(attempt, restart["run_id"]),
                "caught_up": True, "reading": None, "timed_out": False}
    settings = attempt.settings
    deadline = time.monotonic() + settings.verify_timeout_seconds
    run_id = None
    while True:
        ours = attempt.restarted_run()
        live = ours is not None and ours.stale_reason(attempt.control_settings) is None
        if live:
            run_id = ours.run_id
        elif run_id is not None or ours is not None or (restart.get("pid") and not alive(restart["pid"], None)):
            return {"error": f"the restarted run ended{_log_tail(restart)}", "run_id": run_id,
                    "progress": _progress(attempt, run_id) if run_id else [], "caught_up": False, "reading": None,
                    "timed_out": False}
        rows = _progress(attempt, run_id) if run_id else []
        with_input = [r for r in rows if r["input_rows"]]
        caught, reading = False, None
        if run_id:
            caught, reading = verify.caught_up(observe_reading(attempt.layout, attempt.target, run_id, live,
                                                               restart.get("latest_committed_batch")))
        done = len(with_input) >= settings.verify_batches or caught
        if done or time.monotonic() > deadline:
            error = None if run_id else (f"the restarted run did not start within "
                                         f"{settings.verify_timeout_seconds:g} s{_log_tail(restart)}")
            return {"error": error, "run_id": run_id, "progress": rows, "caught_up": caught, "reading": reading,
                    "timed_out": not done}
        time.sleep(settings.poll_seconds)


def _progress(attempt: AttemptView, run_id: str) -> list[dict[str, Any]]:
    table = read_table(attempt.layout.ops_table(progress_table.TABLE), filters=[("stateops_run_id", "=", run_id)])
    rows = [] if table is None else [r for r in table.to_pylist() if r["query_name"] == attempt.target.job]
    return [{"batch_id": r["batch_id"], "input_rows": r["input_rows"],
             "event_time_max_ms": _ms(r.get("event_time_max")), "watermark_ms": _ms(r["watermark"])}
            for r in sorted(rows, key=lambda r: r["batch_id"])]


def _progress_through(attempt: AttemptView, run_id: str, batch: int, started_after: int | None) -> list[dict[str, Any]]:
    """The run's progress rows up to `batch`, once the row of `batch` is recorded (the listener appends it
    just after the commit); batches up to `started_after` ran before the restart."""
    deadline = time.monotonic() + attempt.settings.verify_timeout_seconds
    while True:
        rows = _progress(attempt, run_id)
        if (started_after is not None and batch <= started_after) or any(
                r["batch_id"] >= batch for r in rows) or time.monotonic() > deadline:
            return [r for r in rows if r["batch_id"] <= batch]
        time.sleep(attempt.settings.poll_seconds)


def _ms(value: Any) -> int | None:
    if value is None:
        return None
    return int(value.timestamp() * 1000)


def observe_reading(layout: Layout, target: JobTarget, run_id: str, running: bool,
                    start_batch: int | None) -> verify.Reading:
    """What run `run_id` of the job has read so far, for verify.caught_up: the checkpoint's batches, the
    stateful query's latest idle report (written by the run: stateops.progress.record_idle) and the available
    input the checkpoint has not read. The checkpoint is read first: input landing meanwhile counts as unread.
    running: the run holds the job's live lease; start_batch: the checkpoint's latest batch when it started."""
    try:
        checkpoint: Checkpoint | None = Checkpoint.open(target.checkpoint)
        committed, planned = checkpoint.committed_batches(), checkpoint.offset_batches()
    except StateOpsError:  # a fresh checkpoint before its first batch
        checkpoint, committed, planned = None, [], []
    idle = progress_table.idle_report(layout, target.job, run_id, target.job) or {}
    return verify.Reading(running=running, start_batch=start_batch, committed=committed[-1] if committed else None,
                          planned=planned[-1] if planned else None, idle_at=idle.get("idle_at"),
                          idle_after=idle.get("after_batch"), unread=_unread(target, checkpoint))


def _unread(target: JobTarget, checkpoint: Checkpoint | None) -> tuple[str, ...] | None:
    """The available input `checkpoint` has not read: file sources, the landed files its source logs do not
    name; Kafka, the partitions whose brokers hold records past the offsets of its latest committed batch.
    None when that cannot be told (no batch yet, brokers not answering)."""
    if target.kafka is not None:
        committed = checkpoint.committed_batches() if checkpoint else []
        read = kafka_offsets.recorded(checkpoint.source_offsets(committed[-1])) if committed else {}
        try:
            return tuple(kafka_offsets.unread(read, kafka_offsets.log_ends(target.kafka, sorted(read), 5.0))) if read \
                else None
        except StateOpsError:
            return None
    if not target.landing:
        return None
    read = {coverage.plain(p) for files in (checkpoint.source_files() if checkpoint else {}).values()
            for p, _ in files}
    landed = set().union(*(coverage.landing_files(folder) for folder in target.landing))
    return tuple(sorted(landed - read))


def _log_tail(restart: dict[str, Any]) -> str:
    path = restart.get("log")
    if not path:
        return ""
    try:
        with open(path, errors="replace") as handle:
            lines = [line.strip() for line in handle.read().splitlines() if line.strip()]
    except OSError:
        return ""
    return f" (log {path}: {lines[-1][:300]})" if lines else f" (log {path})"
