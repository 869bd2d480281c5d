"""The sensors read the ops tables on an S3 API server over plain HTTP with the storage layer's options, as every
other reader does, not with what the process environment happens to hold: the fleet soak's S3 home skipped every
health tick for an hour ("cannot be opened: Generic S3 error") because the sensors' reader asked delta-rs without
them. No JVM; moto's server on loopback (the module fixture sets AWS_ALLOW_HTTP for the tests' own readers, and this
test removes it)."""
import pytest

from stateops import progress
from stateops.remediation.signals import read_ops

pytestmark = pytest.mark.e2e


def test_the_sensors_read_the_progress_table_on_s3_over_plain_http(s3_layout, monkeypatch):
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    event = {"id": "q1", "runId": "r1", "name": "user_activity", "batchId": 7, "numInputRows": 5,
             "timestamp": "2026-01-01T00:00:00.000Z", "durationMs": {"triggerExecution": 120}}
    progress.append(s3_layout, [progress.progress_row(event, "user_activity", "run-1")])

    table = read_ops(s3_layout, progress.TABLE, ("job", "query_id", "batch_id", "input_rows"))

    assert table.to_pylist() == [{"job": "user_activity", "query_id": "q1", "batch_id": 7, "input_rows": 5}]


def test_every_process_that_read_the_progress_table_on_s3_exits_with_status_0(s3_layout):
    """delta-rs's reader on object storage runs under Arrow's I/O threads too: a child that read the table must
    exit with status 0 every time (tests/unit/test_delta_reads.py has the local table and the failure it guards)."""
    import json
    import subprocess
    import sys

    events = [{"id": "q1", "runId": "r1", "name": "user_activity", "batchId": batch, "numInputRows": batch,
               "timestamp": f"2026-01-01T00:00:0{batch}.000Z", "durationMs": {"triggerExecution": 120}}
              for batch in range(3)]
    progress.append(s3_layout, [progress.progress_row(event, "user_activity", "run-1") for event in events[:2]])
    progress.append(s3_layout, [progress.progress_row(events[2], "user_activity", "run-1")])
    reader = ("import json, sys\nfrom stateops import progress\nfrom stateops.layout import Layout\n"
              "rows = progress.read(Layout.of(sys.argv[1]), 'user_activity').select(['batch_id', 'input_rows'])\n"
              "print(json.dumps(sorted(rows.to_pylist(), key=lambda r: r['batch_id'])))\n")
    statuses = []
    for _ in range(4):
        done = subprocess.run([sys.executable, "-c", reader, s3_layout.home], capture_output=True, text=True,
                              timeout=120)
        assert json.loads(done.stdout or "null") == [{"batch_id": b, "input_rows": b} for b in range(3)], done.stderr
        statuses.append(done.returncode)
    assert statuses == [0] * 4, statuses
