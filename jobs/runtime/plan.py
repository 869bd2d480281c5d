"""What a job's query will keep in state, read from its analyzed plan when the run starts (no query yet).

StateOps runs stateful jobs: the transformation must return a streaming DataFrame with at least one
stateful operator, as Spark itself decides it (UnsupportedOperationChecker.isStatefulOperation:
aggregations, deduplication, stream-stream joins, (flat)MapGroupsWithState, applyInPandasWithState,
transformWithState). Anything else is refused before a query starts, naming the field and the fix.

Operators whose state expires by processing time (transformWithState in ProcessingTime mode, which TTL
needs; processing-time timeouts) make Spark run another, empty, batch after every batch, so an
availableNow run would never end (measured: hundreds of empty batches). The runner turns no-data batches
off for bounded runs of such plans; TTL then expires state in the batches that have data.
"""
from __future__ import annotations

from dataclasses import dataclass

from stateops.errors import ConfigError

from stateops.jobs.definition.spec import JobSpec

_FIX = ("return the streaming DataFrame built from the streams it is given, with a stateful operator: an "
        "aggregation, dropDuplicatesWithinWatermark, a join of two streams, or keyed state "
        "(transformWithStateInPandas, applyInPandasWithState)")


@dataclass(frozen=True)
class StatefulPlan:
    operators: tuple[str, ...]        # the stateful operators' logical plan nodes, top down
    processing_time: tuple[str, ...]  # those whose state expires (or times out) by processing time


def _children(node) -> list:
    children = node.children()
    return [children.apply(i) for i in range(children.size())]


def _by_processing_time(node) -> bool:
    for attribute in ("timeMode", "timeout"):  # transformWithState / (flat)MapGroupsWithState
        try:
            if "ProcessingTime" in str(getattr(node, attribute)().toString()):
                return True
        except Exception:  # noqa: BLE001 - py4j raises when the node has no such attribute
            continue
    return False


def stateful_plan(frame, spec: JobSpec) -> StatefulPlan:
    """The stateful operators of `frame`; ConfigError when it is not a streaming DataFrame or has none."""
    from pyspark.sql import DataFrame

    where = f"jobs.{spec.name}.transformation"
    if not isinstance(frame, DataFrame):
        raise ConfigError(where, f"{spec.transformation!r} returned {type(frame).__name__}, not a DataFrame", _FIX)
    if not frame.isStreaming:
        raise ConfigError(where, f"{spec.transformation!r} returned a batch DataFrame, not a streaming one "
                          "(was it read with spark.read instead of from the streams it is given?)", _FIX)
    checker = frame.sparkSession._jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
    stateful, expiring, seen, pending = [], [], [], [frame._jdf.queryExecution().analyzed()]
    while pending:
        node = pending.pop(0)
        seen.append(str(node.nodeName()))
        if checker.isStatefulOperation(node):
            stateful.append(seen[-1])
            if _by_processing_time(node):
                expiring.append(seen[-1])
        pending.extend(_children(node))
    if not stateful:
        raise ConfigError(where, f"{spec.transformation!r} returned a stateless streaming DataFrame (operators: "
                          f"{', '.join(dict.fromkeys(seen))})", _FIX)
    return StatefulPlan(tuple(stateful), tuple(expiring))
