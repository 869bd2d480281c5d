"""A process that read a Delta table exits cleanly. delta-rs's default reader (a Python file system over its Rust
object store, under Arrow's I/O threads) made 6 of 8 such processes abort at exit with status 134 ("terminate
called without an active exception"; delta-io/delta-rs#2184), after `stateops jobs profile` had printed its answer;
stateops.delta.scan reads a local table through Arrow's own file system. Oracle: the rows written, and each child's
exit status (real delta-rs tables, real child processes)."""
from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from stateops.delta import read_table

pytestmark = pytest.mark.unit

RUNS = 6
READER = """
import json, sys
from stateops.delta import read_table
found = read_table(sys.argv[1], ["k", "v"], [("k", "in", ["a", "c"])])
print(json.dumps(sorted(found.to_pylist(), key=lambda r: r["k"])))
"""


def _table(uri: str) -> None:
    for part in ({"k": ["a", "b"], "v": [1, 2]}, {"k": ["c", "d"], "v": [3, 4]}):  # two files: two fragments
        write_deltalake(uri, pa.table(part), mode="append")


def test_every_process_that_read_a_local_table_exits_with_status_0(tmp_path):
    uri = str(tmp_path / "a folder with spaces" / "t")  # the table's URI percent-encodes them
    _table(uri)
    expected = [{"k": "a", "v": 1}, {"k": "c", "v": 3}]
    assert read_table(uri, ["k", "v"], [("k", "in", ["a", "c"])]).sort_by("k").to_pylist() == expected
    statuses = []
    for _ in range(RUNS):
        done = subprocess.run([sys.executable, "-c", READER, uri], capture_output=True, text=True, timeout=120)
        assert json.loads(done.stdout) == expected, done.stderr
        statuses.append(done.returncode)
    assert statuses == [0] * RUNS, statuses
