"""The records of a key that a Kafka job read, by offset range, and the micro-batch that read each.

A Kafka source records in `offsets/N`, per topic and partition, the next offset to read after batch N, and in
`sources/<i>/0` the offsets its first batch started at; the progress table keeps each batch's (start, end]
for good, after Spark purged `offsets/` (last 100 batches). So the records up to batch N are one bounded
read of the topic (`startingOffsets` = where the checkpoint started, `endingOffsets` = batch N's ends), and
the batch that read a record is the first whose end lies past its offset, when the end of the batch before
is known too; otherwise it stays None (unknown), never guessed. Records Kafka's retention already deleted
are simply not found (the read does not fail on them: explaining is an inspection).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from stateops.checkpoints import kafka_offsets

Offsets = Mapping[str, Mapping[str, int]]  # topic -> partition -> offset


@dataclass(frozen=True)
class KafkaBatches:
    """Per micro-batch, the offsets it ended at (exclusive), and where the checkpoint started."""

    ends: Mapping[int, Offsets] = field(default_factory=dict)
    initial: Offsets = field(default_factory=dict)

    def micro_batch_of(self, topic: str, partition: str, offset: int) -> int | None:
        for batch in sorted(self.ends):
            end = self.ends[batch].get(topic, {}).get(partition)
            if end is None or end <= offset:
                continue
            if batch == 0:
                return 0
            before = self.ends.get(batch - 1)
            if before is None:
                return None  # the first known batch that reached it: it, or an earlier one? unknown
            return batch if before.get(topic, {}).get(partition, 0) <= offset else None
        return None


def load(checkpoint, progress_rows: Iterable[Mapping[str, Any]]) -> KafkaBatches:
    """From the retained `offsets/` (the truth) and the progress rows (stateops.progress.query_batches) for
    older batches; a re-executed batch's last recorded attempt wins."""
    ends: dict[int, Offsets] = {}
    for row in progress_rows:
        sources = row.get("sources") or []
        recorded = kafka_offsets.recorded([s.get("end_offset") for s in sources])
        if recorded:
            ends[int(row["batch_id"])] = recorded
    for batch in checkpoint.offset_batches():
        recorded = kafka_offsets.recorded(checkpoint.source_offsets(batch))
        if recorded:
            ends[batch] = recorded
    return KafkaBatches(ends, kafka_offsets.initial(checkpoint.path))


def read_records(spark, inp, batches: KafkaBatches, key: str, batch_id: int) -> list[dict[str, Any]]:
    """The key's records of input `inp` (its topic) up to the end of `batch_id`: partition, offset,
    arrival (the record timestamp) and the parsed row (None where the value does not parse)."""
    from pyspark.sql import functions as F

    from stateops.lineparse import parse_rows

    topic = inp.topic
    ends = batches.ends.get(batch_id, {}).get(topic)
    if not ends:
        return []
    start = batches.initial.get(topic)
    reader = (spark.read.format("kafka").options(**dict(inp.kafka.options))
              .option("kafka.bootstrap.servers", inp.kafka.bootstrap_servers)
              .option("subscribe", topic)
              .option("startingOffsets", json.dumps({topic: dict(start)}) if start else "earliest")
              .option("endingOffsets", json.dumps({topic: dict(ends)}))
              .option("failOnDataLoss", "false"))
    rows = (reader.load().select(
        F.col("partition").cast("string").alias("partition"), "offset", F.col("timestamp").alias("arrival"),
        F.explode(parse_rows(spark, F.col("value").cast("string"), inp.schema)).alias("row"))
        .where(F.col(f"row.`{inp.key_column}`").cast("string") == F.lit(key))
        .collect())
    return [{"partition": r["partition"], "offset": r["offset"], "arrival": r["arrival"], "row": r["row"]}
            for r in rows]
