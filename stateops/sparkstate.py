"""What reading or rewriting a checkpoint's state through Spark needs: the coordinator first, and the reader
options of each unit the state reader reads (the audit and explain-key enumerate stores the same way). Nothing
here imports pyspark: the core calls it with the session it is handed."""
from __future__ import annotations

import json

ReaderOptions = tuple[tuple[str, str], ...]


def ensure_state_coordinator(spark) -> None:
    """Spark's state reader and its offline repartition report to the StateStoreCoordinator, which exists only
    once the session's StreamingQueryManager does: a fresh session (the CLI, a runbook) fails with
    RpcEndpointNotFoundException without this."""
    spark.streams.active  # noqa: B018 (creates the manager and its coordinator)


def readable_units(operator_id: int, store_name: str, properties: str | None) -> list[tuple[str, ReaderOptions]]:
    """(label, `statestore` reader options) for each unit Spark's state reader reads on its own, from one row of
    `state-metadata`: a transformWithState operator's state variables one by one (its timers left out: internal
    state, `$`-named), any other store whole."""
    base: ReaderOptions = (("operatorId", str(operator_id)),)
    try:
        variables = json.loads(properties).get("stateVariables", []) if properties else []
    except (ValueError, AttributeError):
        variables = []
    names = [v["stateName"] for v in variables if isinstance(v, dict) and "stateName" in v
             and "timer" not in str(v.get("stateVariableType", "")).lower() and not v["stateName"].startswith("$")]
    if names:
        return [(name, base + (("stateVarName", name),)) for name in names]
    return [(store_name, base if store_name == "default" else base + (("storeName", store_name),))]
