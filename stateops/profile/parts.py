"""A micro-batch's duration split into parts that add up to it.

Spark's progress event times the trigger's phases on the driver (`durationMs`: latestOffset, getBatch,
queryPlanning, addBatch, walCommit, commitOffsets, within triggerExecution) and each stateful operator's work as
task time summed over its tasks (allUpdatesTimeMs, allRemovalsTimeMs, commitTimeMs). Nothing in it splits addBatch,
where a foreachBatch sink runs the batch's plan and writes it: StateOps' batch writer times its own steps there
(Laps: the plan's run, the sink's write, the dead letters). The parts, in milliseconds of wall time:

  planning                  queryPlanning: the batch's plan made
  offsets                   latestOffset, getBatch (getOffset, setOffsetRange): the sources' new input found
  handover                  from addBatch's start to the writer's first line: Spark's foreachBatch sink turning the
                            batch's plan into the writer's DataFrame, the call into Python, the lease check (the
                            driver's clock: the trigger's start in the event, plus the phases before addBatch,
                            against the writer's)
  read_parse                the plan's run less the state operators' shares: the sources read and parsed, the
                            query's stateless steps and shuffles, the result handed to the driver
  state_updates:<operator>  an operator's updates of its stores (the rows it read from its shuffle included)
  state_eviction:<operator> its removals past the watermark (the eviction scan)
  state_commit              every store's commit: the state's checkpoint
  sink_write                the output written (Delta), after the plan ran
  dead_letters              the batch's rejected rows collected and written
  log                       walCommit, commitOffsets: the offset and commit logs' files
  rest                      the duration less all of the above: the trigger's own work between its phases, the
                            writer's return to Spark

An operator's task time runs on up to min(cores, its partitions) tasks at once: its wall share is the task time
over that, and the operators' shares together never take more than the plan's run (their tasks also wait for
their input). A batch no StateOps writer ran (the `noop` sink) has its whole addBatch as the plan's run.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Mapping

from stateops.timefmt import spark_instant

OFFSETS = ("latestOffset", "getBatch", "getOffset", "setOffsetRange")
LOG = ("walCommit", "commitOffsets")
PLAN_RUN, SINK_WRITE, DEAD_LETTERS, HANDOVER = "plan_run", "sink_write", "dead_letters", "handover"
BEGAN_AT = "began_at"  # a lap that is not a part: when the writer got the batch (epoch ms)
PARTS = "stateopsParts"  # where a progress event StateOps recorded carries its parts (not a field of Spark's)
CORES = "stateopsCores"  # and the cores its tasks shared (ProgressRecorder)


class Laps:
    """The batch writer's stopwatch: `begin(batch)`, then `lap(name)` after each step (the time since the last
    mark, added to `name`), `end()`; the progress listener takes a batch's laps once its event comes (`take`).
    Foreach-batch calls and progress events come on different threads; a batch's laps wait here until taken
    (a run keeps at most the last few: events of batches whose laps were never taken do not pile up)."""

    KEPT = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[int, dict[str, float]] = {}
        self._batch: int | None = None
        self._laps: dict[str, float] = {}
        self._mark = 0.0

    def begin(self, batch_id: int) -> None:
        self._batch, self._laps, self._mark = batch_id, {BEGAN_AT: time.time() * 1000.0}, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self._laps[name] = self._laps.get(name, 0.0) + (now - self._mark) * 1000.0
        self._mark = now

    def end(self) -> None:
        with self._lock:
            if self._batch is not None:
                self._done[self._batch] = self._laps
                for old in sorted(self._done)[:-self.KEPT]:
                    del self._done[old]
            self._batch, self._laps = None, {}

    def take(self, batch_id: int) -> dict[str, float] | None:
        with self._lock:
            return self._done.pop(batch_id, None)


def _sum(durations: Mapping[str, Any], keys: tuple[str, ...]) -> float:
    return float(sum(durations.get(key) or 0 for key in keys))


def _operator_names(operators: list[Mapping[str, Any]]) -> list[str]:
    """Each operator's name, numbered where two share one (a query with two dedups)."""
    names = [str(op.get("operatorName") or "operator") for op in operators]
    return [f"{name}#{names[:i].count(name) + 1}" if names.count(name) > 1 else name for i, name in enumerate(names)]


def _state_shares(operators: list[Mapping[str, Any]], cores: int) -> dict[str, float]:
    """Each operator's updates and eviction, and every store's commit, as wall time (the module doc)."""
    shares: dict[str, float] = {}
    commit = 0.0
    for name, op in zip(_operator_names(operators), operators):
        at_once = max(1, min(cores, int(op.get("numShufflePartitions") or 1)))
        shares[f"state_updates:{name}"] = float(op.get("allUpdatesTimeMs") or 0) / at_once
        shares[f"state_eviction:{name}"] = float(op.get("allRemovalsTimeMs") or 0) / at_once
        commit += float(op.get("commitTimeMs") or 0) / at_once
    shares["state_commit"] = commit
    return shares


def attribute(progress: Mapping[str, Any], laps: Mapping[str, float] | None, cores: int) -> dict[str, int]:
    """The batch's parts (the module doc) in whole milliseconds, adding up to its duration (`batchDuration`, else
    triggerExecution): `rest` takes what the others leave, never below 0. Without the writer's laps (no StateOps
    writer ran the batch) the whole addBatch is the plan's run."""
    durations = progress.get("durationMs") or {}
    duration = float(progress.get("batchDuration") or durations.get("triggerExecution") or 0)
    add_batch = float(durations.get("addBatch") or 0)
    laps = dict(laps or {})
    began_at = laps.pop(BEGAN_AT, None)
    parts = {"planning": float(durations.get("queryPlanning") or 0), "offsets": _sum(durations, OFFSETS)}
    if began_at is not None and progress.get("timestamp"):
        before = parts["planning"] + parts["offsets"] + float(durations.get("walCommit") or 0)
        waited = began_at - spark_instant(progress["timestamp"]).timestamp() * 1000.0 - before
        parts[HANDOVER] = min(max(0.0, waited), max(0.0, add_batch - sum(laps.values())))
    plan_run = max(0.0, laps.get(PLAN_RUN, add_batch - parts.get(HANDOVER, 0.0) - sum(laps.values())))
    shares = _state_shares(list(progress.get("stateOperators") or []), cores)
    state = sum(shares.values())
    scale = plan_run / state if state > plan_run else 1.0
    parts["read_parse"] = plan_run - state * scale
    parts.update({name: share * scale for name, share in shares.items()})
    parts[SINK_WRITE] = laps.get(SINK_WRITE, 0.0)
    parts[DEAD_LETTERS] = laps.get(DEAD_LETTERS, 0.0)
    parts["log"] = _sum(durations, LOG)
    whole = {name: int(round(ms)) for name, ms in parts.items()}
    whole["rest"] = max(0, int(round(duration)) - sum(whole.values()))
    return whole


def largest(parts: Mapping[str, int]) -> str:
    """The part that took longest (the first of equals, in the parts' order)."""
    return max(parts, key=lambda name: parts[name])
