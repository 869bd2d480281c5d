"""The checkpoints PySpark 3.5 wrote (tests/fixtures/spark35, by `bash scripts/spark35-checkpoints` running
tests/support/spark35_writer.py) and what each one's query was."""
from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "spark35"
JOIN_STORES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")
# What each checkpoint's query was (tests/support/spark35_writer.py): (operator, store) -> (operator name, kind).
WRITTEN = {
    "aggregation_hdfs": {(0, "default"): ("stateStoreSave", "aggregation")},
    "dedup_rocksdb_changelog": {(0, "default"): ("stateStoreSave", "aggregation"), (1, "default"): ("dedupe", "dedup")},
    "join": {(0, store): ("symmetricHashJoin", "join") for store in JOIN_STORES},
    # applyInPandasWithState writes the state flatMapGroupsWithState writes: the same schema, the same kind
    "pandas_state": {(0, "default"): ("flatMapGroupsWithState", "custom")},
}
