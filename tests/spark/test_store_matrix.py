"""The support matrix (issue 51) on checkpoints written by plain PySpark queries (tests/support/store_matrix.py):
for every store and format Spark 4.2 writes, the deep audit lists every operator Spark's `state-metadata` lists and
reads each store's rows per partition as Spark's state reader reads them; the fast audit reads the same operators
from the files alone; the skew and growth signals (the audits' findings) judge them without an unreadable store.
A cell that cannot be read would have to be refused in one line (the deep audit's refusal of unlisted state:
test_audit_deep). The adopted-job capabilities (run, audits, retention, explain-key, runbooks) on the default store:
test_adoption."""
from __future__ import annotations

import pytest

from stateops.audit import deep_audit, fast_audit
from stateops.audit.context import build_context
from stateops.audit.deep import store_refs
from stateops.audit.thresholds import Thresholds
from stateops.checkpoint import Checkpoint
from stateops.sparkstate import reading_format

from tests.support.audit_queries import nonzero, oracle_rows
from tests.support.store_matrix import RUN

pytestmark = pytest.mark.spark



@pytest.mark.parametrize("cell", RUN)
def test_the_deep_audit_reads_every_operator_as_the_state_reader_does(spark, matrix, cell):
    checkpoint = matrix[cell]
    opened = Checkpoint.open(checkpoint)
    # Spark's readers, told the checkpoint's format (a format-2 checkpoint read as format 1 lists nothing)
    def own_format():
        return reading_format(spark, opened.checkpoint_format(opened.latest_committed_batch()))

    with own_format():
        listed = {row.operatorId for row in spark.read.format("state-metadata").load(checkpoint).collect()}
    assert listed and listed == set(opened.operator_ids()), cell
    report = deep_audit(spark, checkpoint)
    assert {op.operator_id for op in report.operators} == listed, cell
    assert not [f for f in report.findings if f.code == "STATE_UNREADABLE"], report.findings
    with own_format():
        refs = store_refs(spark, build_context(checkpoint, None, Thresholds()))
    by_store = {(op.operator_id, op.store_name): op for op in report.operators}
    assert set(by_store) == {(r.operator_id, r.store_name) for r in refs}
    for ref in refs:
        op = by_store[(ref.operator_id, ref.store_name)]
        with own_format():
            expected = oracle_rows(spark, checkpoint, **dict(ref.options))
        assert nonzero(op.rows_per_partition) == expected, (cell, ref)
        assert op.rows_total == sum(expected.values()) > 0, (cell, ref)

    fast = fast_audit(checkpoint)
    assert {op.operator_id for op in fast.operators} == listed, cell
    assert sum(op.bytes_total for op in fast.operators) > 0
