"""What a rebuild can replay: the retained input against what the old checkpoint read, and the write floor.

A rebuild starts a fresh checkpoint on the landing zone, so the file source reads every retained file
again (one batch per file, as the job normally runs): nothing to configure, and the state comes out exact
when every file the old checkpoint read is still there. (Starting at a point instead would need a filter
on `_metadata.file_modification_time`, since the streaming file source has no `modifiedAfter` option
(SPARK-49051); that saves reading old files but cannot prove the state it builds is complete.)

When files the old checkpoint read are gone, rows of a window or session that started before their rows
could arrive would come out as partial aggregates: those must not overwrite correct rows. Every row of
a missing file has an event time at or below max(event time seen) <= watermark + delay after the batch
that read it; so rows whose span starts before that bound (the write floor, with the largest delay the
job ran with: its setting now and every watermark override in its history) are not written. With several
inputs the global watermark is their minimum and bounds none of them: such a rebuild is refused.

A Kafka job's fresh checkpoint reads each partition from the earliest offset the brokers hold, which is where
the old checkpoint started (`sources/<i>/0`) as long as Kafka's retention deleted nothing since (log starts
only move forward; StateOps always starts from the earliest offset). Deleted records cannot be replayed and
no file list tells which event times they held, so such a rebuild is refused, naming partitions and offsets,
like a rewind whose offsets are gone; brokers that cannot be asked refuse it too.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from datetime import datetime, timezone

from stateops.checkpoints import kafka_offsets
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import overrides
from stateops.durations import parse_seconds
from stateops.errors import StateOpsError
from stateops.storage import filesystem
from stateops.layout import Layout

from stateops.recovery.model import RecoveryRefused
from stateops.recovery.target import JobTarget


@dataclass(frozen=True)
class Coverage:
    retained_files: int
    read_before: int
    missing: int
    write_floor_ms: int | None
    kafka_records: int | None = None  # a Kafka job: the records the rebuild replays (all still on the brokers)

    def describe(self) -> str:
        if self.kafka_records is not None:
            return (f"rebuild replays the {self.kafka_records} records the old checkpoint read, from the offsets it "
                    "started at (Kafka still holds every one), so the state is rebuilt exactly")
        text = (f"rebuild replays all {self.retained_files} retained input files from a fresh checkpoint (about one "
                "batch per file)")
        if self.write_floor_ms is None:
            return text + "; every file the old checkpoint read is retained, so the state is rebuilt exactly"
        floor = datetime.fromtimestamp(self.write_floor_ms / 1000, tz=timezone.utc).isoformat()
        return (text + f"; {self.missing} of the {self.read_before} files the old checkpoint read are gone, so rows "
                f"whose event time starts before {floor} are not written (the replay cannot rebuild them completely)")


def plain(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def landing_files(folder: str) -> set[str]:
    fs, root = filesystem(folder)
    if not fs.exists(root):
        return set()
    return {plain(p) for p in fs.find(root) if not posixpath.basename(p).startswith((".", "_"))}


def _floor(checkpoint: Checkpoint, source_batch: int, max_delay_ms: int) -> int:
    """watermark after the query batch that covered `source_batch` (or a later one) + the largest delay."""
    retained = set(checkpoint.offset_batches())
    for batch in checkpoint.committed_batches():
        offsets = checkpoint.source_offsets(batch) if batch in retained else []
        if any(isinstance(o, dict) and o.get("logOffset", -1) >= source_batch for o in offsets):
            return checkpoint.next_watermark_ms(batch) + max_delay_ms
    return checkpoint.next_watermark_ms(checkpoint.latest_committed_batch()) + max_delay_ms


def largest_delay_ms(layout: Layout, target: JobTarget) -> int:
    """The longest watermark delay the job ran with: its setting now, or any override it ever had."""
    values = [target.watermark_delay] + [c.value for c in overrides.history(layout, target.job)
                                         if c.setting == overrides.WATERMARK_DELAY and c.value]
    return max(parse_seconds(v) for v in values) * 1000


def kafka_replay(target: JobTarget, needed: dict[str, dict[str, int]], action: str, fix: str) -> None:
    """Refuses `action` unless the brokers still hold every record from `needed` ({topic: {partition: offset}})
    on (stateops.checkpoints.kafka_offsets): Spark would fail on deleted ones at restart (failOnDataLoss), after the
    checkpoint was already changed."""
    if not needed:
        return
    try:
        starts = kafka_offsets.log_starts(target.kafka, sorted(needed))
    except StateOpsError as err:
        raise RecoveryRefused(f"{target.job}: cannot {action}: the records it would replay cannot be checked: "
                              f"{err}") from None
    gone = kafka_offsets.deleted(needed, starts)
    if gone:
        raise RecoveryRefused(f"{target.job}: cannot {action}: Kafka's retention already deleted records the replay "
                              f"needs, which would be skipped: {'; '.join(gone)}. Fix: {fix}")


def _kafka(checkpoint: Checkpoint, target: JobTarget) -> Coverage:
    """A rebuild of a Kafka job: every record from where the checkpoint started (a partition added later: from
    offset 0) up to the offsets of its latest batch, all of them still on the brokers."""
    started = kafka_offsets.initial(checkpoint.path)
    read = kafka_offsets.recorded(checkpoint.source_offsets(checkpoint.latest_committed_batch()))
    needed = {topic: {p: started.get(topic, {}).get(p, 0) for p in parts} for topic, parts in read.items()}
    kafka_replay(target, needed, "rebuild", "use rewind to a batch whose offsets Kafka still holds, or restore an "
                 f"archive (stateops archives list {target.job})")
    records = sum(max(0, end - needed[topic][p]) for topic, parts in read.items() for p, end in parts.items())
    return Coverage(retained_files=0, read_before=0, missing=0, write_floor_ms=None, kafka_records=records)


def assess(layout: Layout, checkpoint: Checkpoint, target: JobTarget) -> Coverage:
    if target.kafka is not None:
        return _kafka(checkpoint, target)
    read = checkpoint.source_files()
    retained = set().union(*(landing_files(folder) for folder in target.landing))
    gone = {index: [(path, batch) for path, batch in files if plain(path) not in retained]
            for index, files in read.items()}
    missing = sum(len(files) for files in gone.values())
    floor = None
    if missing:
        if len(target.landing) > 1:
            raise RecoveryRefused(f"{target.job}: {missing} input files the checkpoint read are gone, and with "
                                  "several inputs no watermark bounds their event times, so a rebuild cannot tell "
                                  "complete rows from partial ones. Fix: put the input back, or use rewind or restore")
        last = max(batch for files in gone.values() for _, batch in files)
        floor = _floor(checkpoint, last, largest_delay_ms(layout, target))
    return Coverage(retained_files=len(retained), read_before=sum(len(f) for f in read.values()), missing=missing,
                    write_floor_ms=floor)
