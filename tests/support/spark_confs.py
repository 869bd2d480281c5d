"""Session settings for a block of queries, put back afterwards (tests, scenario builders and benchmarks)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


@contextmanager
def sql_confs(spark, confs: dict[str, str]) -> Iterator[None]:
    """Set session SQL confs for the queries started inside the block; restore them afterwards."""
    before = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
