"""The correctness oracle: a batch recomputation, in plain Python, of what each job must produce.

It reads the landing files itself (in modification-time order, one file per micro-batch, as the jobs
read them; or grouped as a crashed and restarted run really grouped them, from the checkpoint's offset
and source logs), parses lines independently of Spark, and replays the watermark rules batch by batch. A
line is a dead letter when it does not parse, or when its time lies more than the job's future tolerance
(default one day) ahead of its file's modification time (whole milliseconds, as Spark reads it).
The watermark of batch i is max(event time seen in batches < i) - delay; it closes state (emits
windows and sessions, evicts, fires timeouts). Late rows are dropped against the watermark of the
batch before (Spark 3.4+ keeps these two apart so chained operators agree). Nothing imports Spark.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from datetime import datetime, timezone
from typing import Iterator, Sequence

WINDOW_MS = 5 * 60_000
SESSION_GAP_MS = 15 * 60_000
PAYMENT_WITHIN_MS = 5 * 60_000
ACTION_TIMEOUT_MS = 30 * 60_000
FUTURE_TOLERANCE_MS = 24 * 3_600_000

SCHEMAS = {
    "events": {"event_id": str, "user_id": str, "event_time": "ts", "action": str, "value": float},
    "orders": {"order_id": str, "user_id": str, "order_time": "ts", "amount": float},
    "payments": {"payment_id": str, "order_id": str, "payment_time": "ts", "amount": float},
}
TIME_COLUMN = {"events": "event_time", "orders": "order_time", "payments": "payment_time"}


def _millis(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return round(moment.timestamp() * 1000)


def parse_line(source: str, line: str, arrival_ms: int, tolerance_ms: float = FUTURE_TOLERANCE_MS) -> dict | None:
    """A typed row, or None when Spark must send the line to the dead-letter table: it does not parse, or
    its time lies more than `tolerance_ms` ahead of `arrival_ms` (its file's modification time)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    row = {}
    for column, kind in SCHEMAS[source].items():
        value = record.get(column)
        if value is None:
            return None
        try:
            row[column] = _millis(value) if kind == "ts" else kind(value)
        except (TypeError, ValueError):
            return None
    row["t"] = row[TIME_COLUMN[source]]
    return row if row["t"] <= arrival_ms + tolerance_ms else None


def file_lines(path: str) -> tuple[int, list[str]]:
    """(modification time in whole ms, as Spark reads it; raw lines) of one landing file."""
    with open(path) as handle:
        return os.stat(path).st_mtime_ns // 1_000_000, [line for line in handle.read().splitlines() if line.strip()]


def file_rows(path: str, source: str) -> list[dict]:
    """The typed rows of one landing file (dead letters left out)."""
    arrival, lines = file_lines(path)
    return [r for r in (parse_line(source, line, arrival) for line in lines) if r is not None]


def landing_files(landing_dir: str) -> list[str]:
    """The files in the order Spark's file source takes them (modification time): one per micro-batch."""
    paths = [os.path.join(landing_dir, n) for n in os.listdir(landing_dir) if not n.startswith((".", "_"))]
    return sorted(paths, key=lambda p: (os.stat(p).st_mtime_ns // 1_000_000, p))


def landing_batches(landing_dir: str) -> list[tuple[int, list[str]]]:
    return [file_lines(path) for path in landing_files(landing_dir)]


def _json_lines(path: str) -> list:
    with open(path) as handle:
        return [json.loads(line) if line.startswith("{") else None for line in handle.read().splitlines()[1:]]


def offset_batches(checkpoint: str) -> list[int]:
    """The batch ids of the checkpoint's `offsets/`, 0 to the newest: the oracle replays every batch, so a log
    with a batch missing (Spark and retention purge old ones; a kept copy must hold them all) is refused, naming
    the batches, rather than read as one batch covering them all."""
    ids = sorted(int(n) for n in os.listdir(os.path.join(checkpoint, "offsets")) if n.isdigit())
    missing = sorted(set(range(ids[-1] + 1)) - set(ids)) if ids else []
    if missing:
        raise ValueError(f"{checkpoint}/offsets misses {len(missing)} batches ({missing[0]} to {missing[-1]}): "
                         "the oracle cannot tell what they read")
    return ids


def files_as_run(checkpoint: str, landing_dir: str) -> list[list[str]]:
    """The landing files each micro-batch of a run read, from the checkpoint's logs.

    offsets/<N> names, for each file source, the last entry of that source's own log (sources/<i>/) that
    batch N covers; the entries name the files. Usually one file per batch, but a crash after the source
    logged its next file and before offsets/<N> was written makes the first batch of the restart cover
    two files (the logged one and one more); a batch without new files (a no-data batch, or a runbook's
    repartition batch) has none.
    """
    paths = {os.path.basename(p): p for p in landing_files(landing_dir)}
    log_batches: dict[int, dict[str, int]] = {}  # source index -> file name -> source log batch
    for index in os.listdir(os.path.join(checkpoint, "sources")):
        folder = os.path.join(checkpoint, "sources", index)
        for entry in os.listdir(folder):
            if entry.split(".")[0].isdigit():
                for record in filter(None, _json_lines(os.path.join(folder, entry))):
                    log_batches.setdefault(int(index), {})[os.path.basename(record["path"])] = record["batchId"]
    (index, files), = [(i, f) for i, f in log_batches.items() if set(f) <= set(paths)]
    offsets_dir = os.path.join(checkpoint, "offsets")
    batches, covered = [], -1
    for batch_id in offset_batches(checkpoint):
        offset = _json_lines(os.path.join(offsets_dir, str(batch_id)))[1:][index]
        upto = offset["logOffset"] if offset else -1
        batches.append([paths[name] for _, name in sorted((b, n) for n, b in files.items() if covered < b <= upto)])
        covered = upto
    return batches


def typed_batches(landing_dir: str, source: str, checkpoint: str | None = None) -> list[list[dict]]:
    """Typed rows per batch: one file per batch, or the files each batch of a run read (`checkpoint`)."""
    batches = files_as_run(checkpoint, landing_dir) if checkpoint else [[p] for p in landing_files(landing_dir)]
    return [[row for path in paths for row in file_rows(path, source)] for paths in batches]


def malformed_count(landing_dir: str, source: str) -> int:
    """Lines the dead-letter table must hold: unparsable or too far in the future."""
    return sum(parse_line(source, line, arrival) is None
               for arrival, lines in landing_batches(landing_dir) for line in lines)


def future_lines(landing_dir: str, source: str) -> list[str]:
    """Lines that parse but lie more than the tolerance ahead of their file (poison timestamps)."""
    return [line for arrival, lines in landing_batches(landing_dir) for line in lines
            if parse_line(source, line, arrival) is None and parse_line(source, line, arrival, float("inf"))]


Delay = int | Sequence[int]  # one delay, or the delay in force in each batch (a runbook changed it)


def delays_switching(batches: int, before_ms: int, after_ms: int, switch: int) -> list[int]:
    """The delay of each batch when a runbook restarted the query with a new delay at batch `switch`."""
    return [before_ms if i < switch else after_ms for i in range(batches)]


def _delays(batches: list[list[dict]], delay_ms: Delay) -> list[int]:
    return [delay_ms] * len(batches) if isinstance(delay_ms, int) else list(delay_ms)


def _watermarks(batches: list[list[dict]], delay_ms: Delay) -> list[int]:
    """Watermark in force during each batch, plus the final one after the last batch.

    Where the delay changes (a restart with a new delay) the restarted query starts from the watermark the
    checkpoint recorded and has not seen earlier event times: the watermark moves on from there only.
    """
    delays = _delays(batches, delay_ms)
    marks, highest = [0], None
    for i, batch in enumerate(batches):
        if i and delays[i] != delays[i - 1]:
            highest = None
        if batch:
            top = max(r["t"] for r in batch)
            highest = top if highest is None else max(highest, top)
        marks.append(max(marks[-1], highest - delays[i]) if highest is not None else marks[-1])
    return marks


def _late_marks(marks: list[int]) -> list[int]:
    """Watermark for dropping late rows in each batch: the previous batch's watermark (also when Spark
    re-runs a batch after a crash: it reads that watermark back from offsets/N-1)."""
    return [0, *marks[:-1]]


def late_marks(batches: list[list[dict]], delay_ms: Delay) -> list[int]:
    """The watermark each batch's rows are checked against for lateness (that of the batch before)."""
    return _late_marks(_watermarks(batches, delay_ms))[:len(batches)]


def deduplicated(batches: list[list[dict]], delay_ms: Delay) -> Iterator[dict]:
    """The rows dropDuplicatesWithinWatermark(["event_id"]) keeps: on time, and no earlier row of the id within
    its expiry (event time + delay), evicted after each batch."""
    marks, delays = _watermarks(batches, delay_ms), _delays(batches, delay_ms)
    seen: dict[str, int] = {}  # event_id -> expiry
    for batch, late, delay in zip(batches, _late_marks(marks), delays):  # drops and evicts
        seen = {k: v for k, v in seen.items() if v > late}
        for row in batch:
            if row["t"] <= late or row["event_id"] in seen:
                continue
            seen[row["event_id"]] = row["t"] + delay
            yield row


def user_activity(batches: list[list[dict]], delay_ms: Delay) -> set[tuple]:
    """(window_start, window_end, user_id, events, value_sum) after dedup within the watermark."""
    windows: dict[tuple, list] = defaultdict(lambda: [0, 0.0])
    for row in deduplicated(batches, delay_ms):
        start = row["t"] - row["t"] % WINDOW_MS
        acc = windows[(start, start + WINDOW_MS, row["user_id"])]
        acc[0] += 1
        acc[1] += row["value"]
    return {(*key, count, total) for key, (count, total) in windows.items()}


# Spark evicts by the watermark after a batch only in a next batch: the no-data batch a run plans after a batch of
# its own. A bounded run over one file per batch ends with it, so the oracles close by the final watermark too
# (`after_last`). Batches read from a checkpoint's logs list every no-data batch Spark ran; a run stopped right after
# a data batch and restarted with no new input runs none (Spark 4.2's MicroBatchExecution asks only the previous
# batch of the same run whether another is due), and the rows it would emit wait in the state for the next batch:
# pass after_last=False there.


def user_sessions(batches: list[list[dict]], delay_ms: int, after_last: bool = True) -> set[tuple]:
    """(session_start, session_end, user_id, events, first, last) for sessions closed by the watermark.

    Replayed batch by batch, as Spark's session state does: a row is late when its session would already have
    ended (t + gap <= the previous batch's watermark); the rest merge with the user's open sessions and each
    other; at the end of each batch the sessions that ended by the batch's watermark are emitted and leave the
    state, so a row arriving later within the gap of an emitted session starts a session of its own."""
    marks = _watermarks(batches, delay_ms)
    open_sessions: dict[str, list[list[int]]] = defaultdict(list)  # user -> sessions, each its sorted times
    sessions = set()

    def close(mark: int) -> None:
        for user, held in open_sessions.items():
            for times in [t for t in held if t[-1] + SESSION_GAP_MS <= mark]:
                held.remove(times)
                sessions.add((times[0], times[-1] + SESSION_GAP_MS, user, len(times), times[0], times[-1]))

    for batch, late, mark in zip(batches, _late_marks(marks), marks):
        for row in batch:
            if row["t"] + SESSION_GAP_MS > late:
                open_sessions[row["user_id"]].append([row["t"]])
        for user, held in open_sessions.items():
            merged: list[list[int]] = []
            for times in sorted(held):
                if merged and times[0] < merged[-1][-1] + SESSION_GAP_MS:
                    merged[-1] = sorted(merged[-1] + times)
                else:
                    merged.append(times)
            open_sessions[user] = merged
        close(mark)
    if after_last:
        close(marks[-1])
    return sessions


def join_watermarks(orders: list[list[dict]], payments: list[list[dict]], delay_ms: int) -> list[int]:
    """The join's global watermark (the minimum of the two inputs') in force during each batch, plus the
    final one; a row of batch i is late when its time <= entry i - 1 (0 for the first batch)."""
    order_marks, payment_marks = _watermarks(orders, delay_ms), _watermarks(payments, delay_ms)
    return [min(a, b) for a, b in zip(order_marks, payment_marks)]


def order_payments(orders: list[list[dict]], payments: list[list[dict]], delay_ms: int) -> set[tuple]:
    """(order_id, payment_id, order_time, payment_time) for pairs within the bound, replayed batch by batch.

    Both inputs advance in lockstep (one file each per batch); the global watermark is the minimum. Late
    rows are dropped against the previous batch's watermark; new rows are joined with the state, and only
    then, at the end of the batch and with the batch's own watermark, orders that no future payment can
    match (order_time + bound behind the watermark) and payments that no future order can match
    (payment_time behind the watermark) leave the state.
    """
    marks = join_watermarks(orders, payments, delay_ms)
    held_orders: list[dict] = []
    held_payments: list[dict] = []
    pairs = set()

    def within(o: dict, p: dict) -> bool:
        return o["order_id"] == p["order_id"] and o["t"] <= p["t"] <= o["t"] + PAYMENT_WITHIN_MS

    for order_batch, payment_batch, late, mark in zip(orders, payments, _late_marks(marks), marks):
        new_orders = [r for r in order_batch if r["t"] > late]
        new_payments = [r for r in payment_batch if r["t"] > late]
        for o in new_orders:
            pairs.update((o["order_id"], p["payment_id"], o["t"], p["t"])
                         for p in held_payments + new_payments if within(o, p))
        for p in new_payments:
            pairs.update((o["order_id"], p["payment_id"], o["t"], p["t"]) for o in held_orders if within(o, p))
        held_orders = [o for o in held_orders + new_orders if o["t"] + PAYMENT_WITHIN_MS >= mark]
        held_payments = [p for p in held_payments + new_payments if p["t"] > mark]
    return pairs


def user_actions(batches: list[list[dict]], delay_ms: int, after_last: bool = True) -> set[tuple]:
    """(user_id, action_count, last_action, first, last) emitted when a user's timeout passes."""
    marks = _watermarks(batches, delay_ms)
    state: dict[str, list] = {}  # user -> [count, last_action, first, last, timeout]
    emitted = set()

    def close(user: str) -> None:
        count, action, first, last, _ = state.pop(user)
        emitted.add((user, count, action, first, last))

    for batch, mark, late in zip(batches, marks, _late_marks(marks)):
        rows = defaultdict(list)
        for row in batch:
            if row["t"] > late:
                rows[row["user_id"]].append(row)
        for user, user_rows in rows.items():
            if user in state and state[user][3] + ACTION_TIMEOUT_MS < mark:
                close(user)
            count, action, first, last, _ = state.get(user, [0, None, None, None, None])
            for row in user_rows:
                count += 1
                if last is None or row["t"] > last:
                    last, action = row["t"], row["action"]
                first = row["t"] if first is None else min(first, row["t"])
            state[user] = [count, action, first, last, max(last + ACTION_TIMEOUT_MS, mark + 1)]
        for user in [u for u, s in state.items() if u not in rows and s[4] < mark]:
            close(user)
    if after_last:
        for user in [u for u, s in state.items() if s[4] < marks[-1]]:
            close(user)
    return emitted
