"""State audits: exact (Spark's State Reader API), explained (findings with a fix), remembered (ops tables).

    deep_audit(spark, checkpoint, batch_id=None, thresholds=..., layout=..., join_bound=None)   (Spark)
    fast_audit(checkpoint, thresholds=..., layout=...)                                         (no JVM)
    fast_audits(layout, {job: (checkpoint, thresholds)}): every job's, reading each ops table once  (no JVM)
        -> AuditReport
    record(layout, report) -> audit id      load_history(layout, checkpoint) -> earlier audit rows
    Thresholds.from_config(config, job)     AuditReport.to_json(): the `stateops audit --json` contract

Nothing here imports Dagster; pyspark is imported inside the deep audit's functions only, so the fast
audit and the tables load without it.
"""
from stateops.audit.deep import deep_audit
from stateops.audit.fast import fast_audit, fast_audits
from stateops.audit.history import load_findings, load_history, record
from stateops.audit.model import CODES, SEVERITIES, AuditReport, Finding, OperatorAudit, skew_ratio
from stateops.audit.thresholds import Thresholds

__all__ = ["AuditReport", "CODES", "Finding", "OperatorAudit", "SEVERITIES", "Thresholds", "deep_audit",
           "fast_audit", "fast_audits", "load_findings", "load_history", "record", "skew_ratio"]
