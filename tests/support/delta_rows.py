"""Read a Delta output table back as plain tuples (timestamps as epoch milliseconds), and its log's
transactions."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.compute as pc
from stateops.delta import open_table


def table_rows(uri: str, columns: list[str]) -> list[tuple]:
    """The table's rows under any storage (an S3 API server over plain HTTP too: stateops.storage's options)."""
    table = open_table(uri).to_pyarrow_table(columns=columns)
    arrays = []
    for name in columns:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = pc.divide(column.cast(pa.timestamp("us")).cast(pa.int64()), 1000)
        arrays.append(column.to_pylist())
    return list(zip(*arrays))


def committed_transactions(uri: str) -> list[tuple[str, int, int]]:
    """(app_id, batch version, Delta log version) of every `txn` action in a local table's log, in order."""
    log = os.path.join(uri, "_delta_log")
    found = []
    for name in sorted(n for n in os.listdir(log) if n.endswith(".json")):
        with open(os.path.join(log, name)) as handle:
            for line in handle:
                txn = json.loads(line).get("txn")
                if txn:
                    found.append((txn["appId"], txn["version"], int(name.split(".")[0])))
    return found
