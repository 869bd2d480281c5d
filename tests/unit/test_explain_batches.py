"""Which micro-batch read which file-source batch, once Spark has purged offsets/ (no JVM).

The batch log joins the checkpoint's retained offsets with the progress ops table (a real Delta table,
written and read with delta-rs here), and says None where neither knows.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from stateops import progress
from stateops.delta import append_rows
from stateops.explain.batches import BatchLog, BatchRecord, progress_records

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _wm(batch: int) -> int:
    return 0 if batch == 0 else int((T0 + timedelta(minutes=10 * batch)).timestamp() * 1000)


def _event(batch: int, ends: list[int], starts: list[int | None], run_id: str = "r1") -> dict:
    """A StreamingQueryProgress as Spark's listener gives it (the fields these rows use)."""
    sources = [{"description": f"FileStreamSource[file:/landing/{name}]",
                "startOffset": None if start is None else {"logOffset": start},
                "endOffset": {"logOffset": end}, "numInputRows": 3}
               for name, start, end in zip(("orders", "payments"), starts, ends)]
    watermark = datetime.fromtimestamp(_wm(batch) / 1000, tz=timezone.utc)
    return {"id": "q1", "runId": run_id, "name": "order_payments", "batchId": batch,
            "timestamp": (T0 + timedelta(seconds=batch)).isoformat().replace("+00:00", "Z"),
            "eventTime": {"watermark": watermark.isoformat().replace("+00:00", "Z")}, "sources": sources}


# A query of 12 batches over two file sources; batch 5 read no new file (a no-data batch), so from then on
# micro-batch b read source batch b - 1. Spark kept offsets/ for batches 8..11 only.
ENDS = {b: (b if b < 5 else b - 1) for b in range(12)}


def _offsets(first: int = 8) -> list[BatchRecord]:
    return [BatchRecord(b, _wm(b), (ENDS[b], ENDS[b])) for b in range(first, 12)]


def _recorded(batches=range(12), run=lambda b: "r1") -> list[BatchRecord]:
    rows = []
    for b in batches:
        start = ENDS[b - 1] if b else None
        row = progress.progress_row(_event(b, [ENDS[b]] * 2, [start] * 2, run(b)), "order_payments", "s1")
        rows.append({"batch_id": row["batch_id"], "run_id": row["run_id"], "timestamp": row["timestamp"],
                     "watermark": row["watermark"], "sources": json.loads(row["sources_json"])})
    return progress_records(rows)


def test_retained_offsets_alone_know_only_the_retained_batches():
    log = BatchLog(_offsets())
    assert log.micro_batch_of(0, 9) == 10 and log.micro_batch_of(1, 10) == 11
    # Source batch 7 ends batch 8, the first retained one: did batch 8 read it, or batch 7? Unknown.
    assert log.micro_batch_of(0, 7) is None
    assert log.micro_batch_of(0, 2) is None
    assert log.watermark_ms(9) == _wm(9) and log.watermark_ms(3) is None and log.watermark_ms(-1) == 0


def test_the_progress_table_keeps_every_batch_exact():
    log = BatchLog(_offsets(), _recorded())
    assert [log.micro_batch_of(0, s) for s in range(11)] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    assert log.micro_batch_of(0, 11) is None  # never read
    assert log.watermark_ms(3) == _wm(3)


def test_a_gap_in_the_progress_table_stays_unknown():
    log = BatchLog(_offsets(), _recorded([b for b in range(12) if b != 3]))
    assert log.micro_batch_of(0, 3) is None  # batch 3's own row is missing
    assert log.micro_batch_of(0, 4) == 4     # batch 4's row says it started after source batch 3
    assert log.watermark_ms(3) is None


def test_retained_offsets_win_over_the_progress_table():
    recorded = [BatchRecord(9, 1, (99, 99), (98, 98), "r1")]
    log = BatchLog(_offsets(), recorded)
    assert log.watermark_ms(9) == _wm(9) and log.end_offset(9, 0) == ENDS[9]


def test_restarts_are_the_batches_where_the_run_id_changes():
    # Batch 6 ran twice (crash, then a restart that re-ran it): the last attempt wins.
    recorded = _recorded(range(7)) + _recorded([6, 7, 8], run=lambda b: "r2")
    assert BatchLog((), recorded).run_starts == frozenset({6})


def test_progress_rows_record_source_offsets_in_a_table_readable_without_a_jvm(tmp_path):
    uri = str(tmp_path / "progress")
    # A table written before sources were recorded: no sources_json column at all.
    old_schema = pa.schema([f for f in progress.SCHEMA if f.name != "sources_json"])
    old = progress.progress_row(_event(0, [0, 0], [None, None]), "order_payments", "s1")
    del old["sources_json"]
    append_rows(uri, pa.Table.from_pylist([old], schema=old_schema))
    new = [progress.progress_row(_event(b, [ENDS[b]] * 2, [ENDS[b - 1]] * 2), "order_payments", "s1")
           for b in (1, 2)]
    append_rows(uri, pa.Table.from_pylist(new, schema=progress.SCHEMA))

    rows = progress.query_batches(uri, "q1")
    assert [r["batch_id"] for r in rows] == [0, 1, 2] and rows[0]["sources"] is None
    assert rows[2]["sources"][1]["end_offset"] == {"logOffset": 2}
    assert rows[2]["sources"][0]["description"] == "FileStreamSource[file:/landing/orders]"
    log = BatchLog((), progress_records(rows))
    assert log.micro_batch_of(1, 2) == 2 and log.micro_batch_of(0, 0) is None  # batch 0: no offsets recorded
    assert progress.query_batches(uri, "another query") == []
    assert progress.query_batches(str(tmp_path / "missing"), "q1") == []
