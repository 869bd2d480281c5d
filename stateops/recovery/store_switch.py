"""The store switch of a stopped checkpoint (the runbook's switch-store step): the state of the latest committed
batch, every operator and store, rewritten from one state store provider to the other at the same version, and
the new provider recorded where Spark reads it. No input is replayed.

Spark restarts a query with the provider its offset log records (the latest batch's `conf`) and loads state
version N+1 for committed batch N. So the switch, in order:
1. `write`: every store's rows, as Spark's state reader reads them at batch N, go into a scratch folder laid out
   as `state/` (`<checkpoint>/state.switch`) through the target provider's own StateStore API, at version N+1
   (the JVM writer io.stateops.state.StoreWriter, behind the runtime's `write_store`); then the marker
   `_COMPLETE` with the rows written per store;
2. `swap`: in each store folder the source provider's files leave (the runbook's archive keeps them) and the
   scratch's move in, file by file; the folder's schema (`_metadata`) stays;
3. `record`: the provider is rewritten in the offsets of batch N and of any later planned batch (their Hadoop
   checksum files removed: Hadoop reads a file without one unchecked);
4. the scratch folder goes.
Each part is idempotent and the next starts only when the last completed, so a switch killed anywhere is
completed by running it again: no offsets name the target yet -> the scratch is rewritten unless complete; a
store folder still in the scratch -> it moves again (the source provider's files are told apart by their kind).
Fault point `switch.part` (job, part: write | cleared | moved | recorded, n) kills it between any two of its
writes (stateops/faults.py).

What cannot move is refused before anything changes (`refusal`): the in-memory store has no column families, so
transformWithState and joins in state format 3 or 4 cannot go there; checkpoints in format 2 name state files by
unique ids the writer does not make.
"""
from __future__ import annotations

import json
import posixpath
from dataclasses import asdict, dataclass
from typing import Callable

from stateops.checkpoints import state_store
from stateops.checkpoints.operators import operator_meta
from stateops.checkpoints.checkpoint import Checkpoint, store_dir
from stateops.faults import fault_point
from stateops.checkpoints.profile import JOIN
from stateops.storage import exists, files_under, move_file, names, read_text, write_text
from stateops.storage.copies import remove_tree

SCRATCH = "state.switch"
COMPLETE = "_COMPLETE"
# What each provider writes in a store folder (Hadoop's `.<name>.crc` files go with their file).
PROVIDER_FILES = {state_store.MEMORY: (".delta", ".snapshot"), state_store.ROCKSDB: (".zip", ".changelog")}
PROVIDER_DIRS = {state_store.MEMORY: (), state_store.ROCKSDB: ("SSTs", "logs")}
TWS = "transformWithState"


@dataclass(frozen=True)
class StoreToWrite:
    """One store of one operator: what the writer needs to rebuild it in another provider."""

    operator_id: int
    store_name: str
    prefix_columns: int   # the key's leading columns the operator scans by (session windows), else 0
    partitions: int


@dataclass(frozen=True)
class SwitchPlan:
    batch: int            # the latest committed batch, whose state (version batch + 1) moves
    source: str           # "rocksdb" | "memory"
    target: str
    stores: tuple[StoreToWrite, ...]

    @property
    def version(self) -> int:
        return self.batch + 1

    def to_dict(self) -> dict:
        return {**asdict(self), "stores": [asdict(s) for s in self.stores]}


# write(checkpoint, batch, store, provider class, version, scratch state root) -> rows written per partition
Writer = Callable[[str, int, StoreToWrite, str, int, str], list[int]]


def source_store(checkpoint: str) -> str | None:
    """The store the checkpoint's state is in now ("rocksdb", "memory" or a provider's class)."""
    found = state_store.of_checkpoint(checkpoint)
    return found[0].store if found else None


def refusal(checkpoint: str, target: str) -> str | None:
    """Why the checkpoint's state cannot move to `target` ("rocksdb" or "memory"), in one clause; None when it can."""
    found = state_store.of_checkpoint(checkpoint)
    if found is None:
        return "the checkpoint has no batch yet: there is no state to switch"
    formats = found[0]
    if formats.store not in state_store.STORES:
        return (f"its state is in a store of its own ({formats.store}): the switch moves state between Spark's "
                "RocksDB and in-memory stores only")
    if formats.store == target:
        return f"its state is already in the {target} store"
    if formats.checkpoint_format != 1:
        return ("the checkpoint is in format 2 (state files named <version>_<id>, the commit log naming the current "
                "one), which the switch does not write")
    opened = Checkpoint(checkpoint)
    for op in opened.operator_ids():
        meta = operator_meta(opened, op)
        if meta is None:
            return (f"operator {op} has no state metadata (a checkpoint written before Spark 4): the switch reads "
                    "each store's layout from it")
        if target == state_store.MEMORY and TWS in meta.operator_name:
            return (f"operator {op} is transformWithState, whose state variables live in column families, which "
                    "the in-memory store does not have")
        if target == state_store.MEMORY and meta.operator_name == JOIN and formats.join_format > 2:
            return (f"operator {op} is a stream-stream join in state format {formats.join_format}, whose stores are "
                    "column families, which the in-memory store does not have (it holds format 2 at most)")
    return None


def plan(checkpoint: str, target: str) -> SwitchPlan:
    """The stores to rewrite (the caller checked `refusal` first)."""
    opened = Checkpoint.open(checkpoint)
    batch = opened.latest_committed_batch()
    # the batch's own partition count, as Spark's reader takes it: the operator metadata keeps the count the
    # operator was created with, also after an offline repartition
    batch_partitions = opened.shuffle_partitions(batch)
    stores = []
    for op in opened.operator_ids():
        meta = operator_meta(opened, op)
        for name, partitions in meta.stores:
            stores.append(StoreToWrite(op, name, meta.prefix_columns.get(name, 0), batch_partitions or partitions))
    formats = state_store.of_checkpoint(checkpoint)[0]
    return SwitchPlan(batch, formats.store, target, tuple(stores))


def _job(checkpoint: str) -> str:
    """The job a checkpoint folder belongs to, as fault points name it (the folder's name)."""
    return posixpath.basename(checkpoint.rstrip("/"))


def _provider_files(name: str, store: str) -> bool:
    base = name[1:-4] if name.startswith(".") and name.endswith(".crc") else name
    return base.endswith(PROVIDER_FILES[store]) or name in PROVIDER_DIRS[store]


def _store_folder(root: str, store: StoreToWrite, partition: int) -> str:
    return store_dir(root, store.operator_id, partition, store.store_name)


def _offsets_to_record(checkpoint: Checkpoint, batch: int) -> list[int]:
    return [b for b in checkpoint.offset_batches() if b >= batch]


def recorded(checkpoint: str, switch: SwitchPlan) -> bool:
    """Whether the offsets of the switched batch (and later) name the target provider: the switch is done."""
    opened = Checkpoint(checkpoint)
    wanted = state_store.STORES[switch.target]
    return all(opened.state_provider(b) == wanted for b in _offsets_to_record(opened, switch.batch))


def write(checkpoint: str, switch: SwitchPlan, writer: Writer) -> dict[str, list[int]]:
    """Part 1: every store into the scratch folder at the switched version, then the marker; the rows written per
    store ("<operator>/<store>") and partition. A complete scratch is kept as it is."""
    scratch = posixpath.join(checkpoint.rstrip("/"), SCRATCH)
    marker = posixpath.join(scratch, COMPLETE)
    if exists(marker):
        return json.loads(read_text(marker))["rows"]
    remove_tree(scratch)
    provider = state_store.STORES[switch.target]
    rows = {}
    for n, store in enumerate(switch.stores):
        rows[f"{store.operator_id}/{store.store_name}"] = writer(checkpoint, switch.batch, store, provider,
                                                                 switch.version, scratch)
        fault_point("switch.part", job=_job(checkpoint), part="write", n=n)
    write_text(marker, json.dumps({"switch": switch.to_dict(), "rows": rows}, sort_keys=True))
    return rows


def swap(checkpoint: str, switch: SwitchPlan) -> int:
    """Part 2: each store folder's source-provider files out, the scratch's in; the files moved."""
    base = checkpoint.rstrip("/")
    moved = 0
    for store in switch.stores:
        for partition in range(store.partitions):
            new = _store_folder(posixpath.join(base, SCRATCH), store, partition)
            if not exists(new):
                continue  # moved by an earlier attempt
            old = Checkpoint(checkpoint).state_dir(store.operator_id, partition, store.store_name)
            for name in names(old) or []:
                if _provider_files(name, switch.source):
                    remove_tree(posixpath.join(old, name))
            fault_point("switch.part", job=_job(checkpoint), part="cleared", n=moved)
            for rel in sorted(files_under(new)):
                move_file(posixpath.join(new, rel), posixpath.join(old, rel))
                moved += 1
                fault_point("switch.part", job=_job(checkpoint), part="moved", n=moved)
            remove_tree(new)
    return moved


def record(checkpoint: str, switch: SwitchPlan) -> list[int]:
    """Part 3: the target provider in the offsets of the switched batch and any later one; the batches rewritten."""
    opened = Checkpoint(checkpoint)
    wanted = state_store.STORES[switch.target]
    rewritten = []
    for batch in _offsets_to_record(opened, switch.batch):
        if opened.state_provider(batch) == wanted:
            continue
        metadata = opened.batch_metadata(batch)
        metadata.setdefault("conf", {})[state_store.PROVIDER] = wanted
        opened.write_batch_metadata(batch, metadata)
        rewritten.append(batch)
        fault_point("switch.part", job=_job(checkpoint), part="recorded", n=batch)
    return rewritten


def apply(checkpoint: str, switch: SwitchPlan, writer: Writer) -> dict:
    """The whole switch, resumable (the module doc): what each part did."""
    done = {"rows": None, "files_moved": 0, "offsets_rewritten": []}
    if not recorded(checkpoint, switch):
        done["rows"] = write(checkpoint, switch, writer)
        done["files_moved"] = swap(checkpoint, switch)
        done["offsets_rewritten"] = record(checkpoint, switch)
    remove_tree(posixpath.join(checkpoint.rstrip("/"), SCRATCH))
    return done


def differences(before: dict | None, after: dict) -> list[str]:
    """How two deep audits (`stateops audit --json`) of one batch differ in rows per operator, store and partition;
    [] when equal."""
    def rows(audit: dict | None) -> dict[tuple[int, str], dict[str, int]]:
        return {(op["operator_id"], op["store_name"]): op["rows_per_partition"] for op in (audit or {}).get(
            "operators", [])}

    old, new = rows(before), rows(after)
    found = [f"operator {op} store {name}: {'missing after' if (op, name) not in new else 'new after'}"
             for op, name in sorted(set(old) ^ set(new))]
    for key in sorted(set(old) & set(new)):
        for partition in sorted(set(old[key]) | set(new[key]), key=int):
            a, b = old[key].get(partition, 0), new[key].get(partition, 0)
            if a != b:
                found.append(f"operator {key[0]} store {key[1]} partition {partition}: {a} rows before, {b} after")
    return found
