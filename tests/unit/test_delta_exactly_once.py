"""delta-rs writes skip a repeated (app_id, batch_id); MERGE keeps one row per key (real Delta tables)."""
from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from stateops.delta import write_batch

pytestmark = pytest.mark.unit


def test_replayed_batch_is_skipped_and_merge_upserts(tmp_path):
    uri = str(tmp_path / "t")
    first = pa.table({"k": ["a", "b"], "v": [1, 2]})
    assert not write_batch(uri, first, app_id="q1", batch_id=0, merge_keys=["k"]).skipped
    replay = write_batch(uri, first, app_id="q1", batch_id=0, merge_keys=["k"])
    assert replay.skipped and replay.rows == 0
    write_batch(uri, pa.table({"k": ["a", "c"], "v": [5, 6]}), app_id="q1", batch_id=1, merge_keys=["k"])
    rows = DeltaTable(uri).to_pyarrow_table().sort_by("k").to_pydict()
    assert rows == {"k": ["a", "b", "c"], "v": [5, 2, 6]}
    assert DeltaTable(uri).transaction_version("q1") == 1


def test_new_checkpoint_means_new_app_id(tmp_path):
    uri = str(tmp_path / "t")
    data = pa.table({"k": ["a"], "v": [1]})
    write_batch(uri, data, app_id="query-old", batch_id=5)
    assert write_batch(uri, data, app_id="query-old", batch_id=3).skipped
    assert not write_batch(uri, data, app_id="query-new", batch_id=0).skipped
    assert DeltaTable(uri).count() == 2
