"""Read a Delta output table back as a set of plain tuples (timestamps as epoch milliseconds)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable


def table_rows(uri: str, columns: list[str]) -> list[tuple]:
    table = DeltaTable(uri).to_pyarrow_table(columns=columns)
    arrays = []
    for name in columns:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = pc.divide(column.cast(pa.timestamp("us")).cast(pa.int64()), 1000)
        arrays.append(column.to_pylist())
    return list(zip(*arrays))
