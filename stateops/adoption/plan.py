"""An adoption as data: what the checkpoint, input and table say, what StateOps' first run will do, and every
reason it is refused (each one line: why, and what to do). `stateops jobs adopt NAME` prints it; `--confirm`
acts on it only when nothing refuses it (stateops.adoption.record).

The batch in flight decides the most. A restart runs batch N (planned, not committed) again over the same input:
- the table's transaction for the checkpoint's writer says N is written: StateOps runs it (its state stores must
  commit) and writes nothing (`written_through` = N);
- it says N is not written: StateOps runs and writes it;
- no transaction says (a `foreachBatch` writer without `txnAppId`): the output of N cannot be known. Refused,
  unless `--replay-last-batch` is given and StateOps' writes are MERGEs (update mode): a MERGE of the same rows
  again leaves the table as it was.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stateops.adoption.evidence import Batches, Sink, Source

READY, REFUSED, ADOPTED = "ready", "refused", "adopted"
WRITTEN, NOT_WRITTEN, UNKNOWN = "written", "not_written", "unknown"


@dataclass(frozen=True)
class AdoptionPlan:
    job: str
    checkpoint: str
    query_id: str | None
    batches: Batches | None
    sources: tuple[Source, ...]
    sink: Sink | None
    state_store: dict[str, Any]
    fit: dict[str, Any]                  # the changed-query check (stateops.jobs.runtime.compatibility.StateFit)
    deadletter: dict[str, Any]           # where dead letters start (the old query's files or offsets)
    in_flight_output: str | None         # written | not_written | unknown (None: no batch in flight)
    written_through: int | None          # the newest batch the table already holds; StateOps skips up to it
    replay_last_batch: bool = False
    refusals: tuple[str, ...] = ()
    adopted: dict[str, Any] | None = None  # the record, once adopted
    notes: tuple[str, ...] = field(default=())

    @property
    def status(self) -> str:
        return ADOPTED if self.adopted else REFUSED if self.refusals else READY

    @property
    def line(self) -> str:
        """The plan in one line: the first refusal, or what StateOps' first run will do."""
        if self.adopted:
            return (f"{self.job}: adopted at {self.adopted.get('adopted_at')} (checkpoint {self.checkpoint}, batch "
                    f"{self.adopted.get('last_committed')}); `stateops jobs run {self.job}` runs it")
        if self.refusals:
            return f"{self.job}: not adopted: {self.refusals[0]}; nothing was changed"
        first = (self.batches.in_flight if self.batches.in_flight is not None else self.batches.last_committed + 1)
        rerun = ("" if self.batches.in_flight is None else
                 f" (batch {self.batches.in_flight} again, {'without writing it: the table holds it' if self.in_flight_output == WRITTEN else 'written by StateOps'})")
        return (f"{self.job}: ready to adopt {self.checkpoint} at batch {self.batches.last_committed}; the first "
                f"run starts at batch {first}{rerun} and reads only the input the old query did not read. Adopt: "
                f"stateops jobs adopt {self.job} --confirm")

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "status": self.status, "line": self.line, "checkpoint": self.checkpoint,
            "query_id": self.query_id,
            "last_committed_batch": self.batches.last_committed if self.batches else None,
            "batch_in_flight": self.batches.in_flight if self.batches else None,
            "in_flight_output": self.in_flight_output, "written_through": self.written_through,
            "replay_last_batch": self.replay_last_batch,
            "sources": [s.to_json() for s in self.sources], "sink": self.sink.to_json() if self.sink else None,
            "state_store": self.state_store, "fit": self.fit, "deadletter": self.deadletter,
            "refusals": list(self.refusals), "notes": list(self.notes), "adopted": self.adopted,
        }

    def text(self) -> list[str]:
        lines = [self.line]
        if self.batches is not None:
            lines.append(f"  checkpoint     {self.checkpoint} (query {self.query_id}): last committed batch "
                         f"{self.batches.last_committed}, in flight {self.batches.in_flight}"
                         + (f" ({self.in_flight_output})" if self.in_flight_output else ""))
        for source in self.sources:
            lines.append(f"  source {source.index}       {source.kind} {', '.join(source.where) or '-'} -> input "
                         f"{source.input or '?'}" + (f": {source.problem}" if source.problem else ""))
        if self.sink is not None:
            lines.append(f"  table          {self.sink.table}: " + (
                f"Delta version {self.sink.version}, txn {self.sink.writer} at batch {self.sink.written}"
                if self.sink.delta else "not a Delta table"))
        if self.state_store:
            lines.append("  state store    " + ", ".join(f"{k} {v['value']} ({v['source']})"
                                                         for k, v in self.state_store.items() if k != "notes"))
        if self.fit:
            lines.append(f"  query          {self.fit.get('line')}")
        if self.deadletter:
            lines.append(f"  dead letters   {self.deadletter.get('start')}")
        lines += [f"  refused        {r}" for r in self.refusals[1:]]
        lines += [f"  note           {n}" for n in self.notes]
        return lines


def in_flight_output(batches: Batches, sink: Sink) -> tuple[str | None, int | None, str | None]:
    """(what the table holds of the batch in flight, the newest batch it holds, a refusal or None)."""
    last = batches.last_committed
    if sink.written is not None and sink.written > (batches.in_flight if batches.in_flight is not None else last):
        return None, None, (f"the table holds batch {sink.written} of {sink.writer}, after the checkpoint's newest "
                            f"batch: the checkpoint is older than its table. Fix: restore the checkpoint that wrote "
                            "it, or the table to the checkpoint's batch")
    if batches.in_flight is None:
        return None, last, None
    if sink.written is not None:
        held = sink.written >= batches.in_flight
        return (WRITTEN if held else NOT_WRITTEN), (batches.in_flight if held else last), None
    return UNKNOWN, last, None


def refusals(*, batches: Batches | None, sources: list[Source], inputs: int, sink: Sink | None, fit: dict[str, Any],
             output: str | None, replay_last_batch: bool, merges: bool, busy: str | None,
             already: str | None) -> list[str]:
    """Every reason not to adopt, each one line: why, and the fix."""
    found: list[str] = []
    if already:
        found.append(already)
    if busy:
        found.append(f"another process is writing the checkpoint: {busy}. Fix: stop the query that writes it, then "
                     "adopt")
    if batches is None or batches.last_committed is None:
        found.append("the checkpoint has no committed batch, so there is no state to keep. Fix: let the job start "
                     "under StateOps on a new checkpoint (remove `checkpoint` from its settings)")
        return found
    if fit.get("status") == "refused":
        found.append(f"the query does not fit the checkpoint's state: {fit.get('operator')}: {fit.get('change')} "
                     f"({fit.get('error_class')}). Fix: make the job's transformation the query that wrote the "
                     "checkpoint")
    elif fit.get("status") == "undecided":
        found.append(f"the changed-query check could not decide ({fit.get('message')}). Fix: run `stateops jobs "
                     "check` on the job and resolve what it says")
    if len(sources) != inputs:
        found.append(f"the checkpoint has {len(sources)} source(s), the job {inputs} input(s). Fix: give the job one "
                     "input per source of the old query, in its order")
    found += [f"source {s.index} of the checkpoint: {s.problem}. Fix: set the input's `path` to the "
              f"{'topic' if s.kind == 'kafka' else 'folder'} the old query read" for s in sources if s.problem]
    if sink is not None and not sink.exists:
        found.append(f"there is no table at {sink.table}. Fix: set `sink_table` to the Delta table the old query "
                     "wrote")
    elif sink is not None and not sink.delta:
        found.append(f"{sink.table} is not a Delta table: StateOps writes its batches exactly once through Delta's "
                     "transactions. Fix: adopt a job whose sink is Delta, or copy the table to Delta first")
    if output == UNKNOWN and not (replay_last_batch and merges):
        batch = batches.in_flight
        found.append(
            f"batch {batch} is in flight (offsets/{batch} without commits/{batch}) and the table keeps no transaction "
            "of this query, so whether its output was written cannot be known. Fix: "
            + ("--replay-last-batch (the job's MERGEs make writing it again harmless)" if merges else
               "finish the batch with the old query (run it once more and stop it after a commit), then adopt; "
               "--replay-last-batch needs a MERGE sink (update mode): an append would write its rows twice"))
    return found
