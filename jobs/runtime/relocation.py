"""The Spark side of a home move (stateops.relocation): the deep audit of every job with a checkpoint, at the old home
and at the new one, compared; a move is verified only when they agree (the same batch and watermark, every operator
and store with the same rows in every partition, the same findings). Bytes are not compared: the copy leaves Hadoop's
checksum sidecars behind on S3 and rewrites the file source's logs. Neither audit is recorded (the old home is not
written, and the new one gets its first audit from its own runs and schedules)."""
from __future__ import annotations

from typing import Any

from stateops.audit import AuditReport, deep_audit
from stateops.layout import Layout
from stateops.storage import exists

from stateops.jobs.definition.catalog import Catalog


def _summary(report: AuditReport) -> dict[str, Any]:
    return {"batch": report.batch_id, "watermark": report.watermark,
            "operators": sorted((op.operator_id, op.operator_name, op.store_name, op.rows_total,
                                 tuple(sorted(op.rows_per_partition.items()))) for op in report.operators),
            "findings": sorted(f.code for f in report.findings)}


def audits_agree(spark, catalog: Catalog, old: Layout, new: Layout) -> list[str]:
    """What differs between each job's deep audit at `old` and at `new` (empty: they agree)."""
    problems = []
    for name, spec in sorted(catalog.jobs.items()):
        before_at, after_at = spec.checkpoint_path(old), spec.checkpoint_path(new)
        if not exists(before_at):
            continue
        audit = {"thresholds": catalog.thresholds(name), "job": name, "join_bound": spec.join_bound}
        before = _summary(deep_audit(spark, before_at, layout=old, **audit))
        after = _summary(deep_audit(spark, after_at, layout=new, **audit))
        for key in before:
            if before[key] != after[key]:
                problems.append(f"{name}: the deep audit's {key} at the new home is {after[key]}, at the old home "
                                f"{before[key]}")
    return problems
