"""What reading or rewriting a checkpoint's state through Spark needs first (the core calls it with the session it
is handed; nothing here imports pyspark)."""
from __future__ import annotations


def ensure_state_coordinator(spark) -> None:
    """Spark's state reader and its offline repartition report to the StateStoreCoordinator, which exists only
    once the session's StreamingQueryManager does: a fresh session (the CLI, a runbook) fails with
    RpcEndpointNotFoundException without this."""
    spark.streams.active  # noqa: B018 (creates the manager and its coordinator)
