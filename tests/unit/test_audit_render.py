"""Markdown tables and PNG charts of an audit, from a hand-built report and history rows (no JVM)."""
from __future__ import annotations

import datetime as dt
import io

import pytest

from stateops.audit.model import AuditReport, Finding, OperatorAudit
from stateops.charts import PNG_SIZE
from stateops.audit.render import (findings_markdown, history_chart, operators_markdown, partition_chart,
                                   save_charts, severity_counts)

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)


def report() -> AuditReport:
    agg = OperatorAudit(operator_id=0, operator_name="stateStoreSave", store_name="default", num_partitions=4,
                        rows_total=1970, rows_per_partition={0: 1820, 1: 60, 2: 50, 3: 40}, bytes_total=123456,
                        bytes_per_partition={0: 100000, 1: 9000, 2: 8000, 3: 6456}, skew_ratio=32.5,
                        kind="aggregation", rows_behind_watermark=7, min_batch_id=3, max_batch_id=9)
    dedup = OperatorAudit(operator_id=1, operator_name="dedupeWithinWatermark", store_name="default",
                          num_partitions=4, rows_total=400, rows_per_partition={0: 100, 1: 101, 2: 99, 3: 100},
                          bytes_total=4096, bytes_per_partition={0: 1024, 1: 1024, 2: 1024, 3: 1024},
                          skew_ratio=1.01, kind="dedup_within_watermark")
    findings = [
        Finding("STATE_SKEW", "warn", 0, "default", "partition 0 holds 1820 of 1970 rows; max/median = 32.5",
                "salt the hot key | or raise partitions"),
        Finding("WATERMARK_LAG", "warn", None, None, "the watermark is 3 h behind", "check the source"),
        Finding("EVICTION_STALLED", "error", 0, "default", "7 rows behind the watermark", "check the query"),
    ]
    return AuditReport(checkpoint="/x/checkpoints/user_activity", batch_id=9, watermark=T0, operators=[agg, dedup],
                       findings=findings, job="user_activity", audited_at=T0)


def history() -> list[dict]:
    rows = []
    for i, (agg_rows, dedup_rows) in enumerate([(500, 100), (900, 200), (1970, 400)]):
        at = T0 + dt.timedelta(hours=i)
        rows.append({"audited_at": at, "operator_id": 0, "operator_name": "stateStoreSave", "store_name": "default",
                     "rows_total": agg_rows, "bytes_total": agg_rows * 60, "kind": "deep"})
        rows.append({"audited_at": at, "operator_id": 1, "operator_name": "dedupeWithinWatermark",
                     "store_name": "default", "rows_total": dedup_rows, "bytes_total": dedup_rows * 10, "kind": "deep"})
    rows.append({"audited_at": T0 + dt.timedelta(hours=3), "operator_id": 0, "operator_name": "stateStoreSave",
                 "store_name": "default", "rows_total": None, "bytes_total": 130000, "kind": "fast"})
    return rows


def _is_png_of_size(png: bytes) -> None:
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    from PIL import Image  # matplotlib's own dependency: decode fully, not just the header

    with Image.open(io.BytesIO(png)) as image:
        image.load()
        assert image.size == PNG_SIZE


def test_operators_markdown_holds_the_numbers():
    md = operators_markdown(report())
    lines = md.splitlines()
    assert lines[0].startswith("| op | operator | store |") and set(lines[1]) <= {"|", "-"}
    assert len(lines) == 4
    agg = lines[2]
    for text in ("stateStoreSave", "aggregation", "| 4 |", "1,970", "40 / 55 / 1,820 (p0)", "123,456 B",
                 "32.5 (rows)", "| 7 |", "3..9"):
        assert text in agg, (text, agg)
    assert "1.01 (rows)" in lines[3] and "| 400 |" in lines[3]


def test_findings_markdown_worst_first_with_escaped_pipes_and_counts():
    md = findings_markdown(report().findings)
    lines = md.splitlines()
    assert lines[0] == "| severity | code | where | message | recommendation |"
    assert "ERROR | EVICTION_STALLED | op 0/default | 7 rows behind" in lines[2]
    assert "STATE_SKEW" in lines[3] and "1820 of 1970" in lines[3] and "hot key \\| or raise" in lines[3]
    assert "WATERMARK_LAG | - |" in lines[4]
    assert severity_counts(report().findings) == {"error": 1, "warn": 2, "info": 0}
    # Rows of the findings table render the same way as Finding objects.
    assert findings_markdown([f.contract() for f in report().findings]) == md
    assert findings_markdown([]) == "_No findings._"


def test_partition_chart_is_a_png_of_the_fixed_size():
    png = partition_chart(report())
    _is_png_of_size(png)
    fast = report()
    for op in fast.operators:  # a fast audit: bytes only
        op.rows_per_partition, op.rows_total, op.skew_basis = {}, None, "bytes"
    _is_png_of_size(partition_chart(fast))
    assert partition_chart(AuditReport(checkpoint="/x", batch_id=0, watermark=None)) is None


def test_history_chart_is_a_png():
    _is_png_of_size(history_chart(history()))
    assert history_chart([]) is None


def test_charts_are_saved_as_files_next_to_the_audit(tmp_path):
    folder = str(tmp_path / "ops" / "job" / "audits" / "a1")
    saved = save_charts(report(), history(), folder)
    assert saved == {"state_per_partition": f"{folder}/state_per_partition.png",
                     "state_over_time": f"{folder}/state_over_time.png"}
    for path in saved.values():
        _is_png_of_size(open(path, "rb").read())
    empty = save_charts(AuditReport(checkpoint="/x", batch_id=0, watermark=None), [], str(tmp_path / "none"))
    assert empty == {}

