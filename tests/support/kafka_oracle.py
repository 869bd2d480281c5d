"""The oracle's input on Kafka: the records each micro-batch read, from the checkpoint's `offsets/N` (per topic
and partition, the next offset to read after batch N) and the records themselves (read with the client)."""
from __future__ import annotations

import json
import os

from tests.support import oracle


def batch_ends(checkpoint: str, topic: str) -> list[dict[int, int]]:
    """Per batch, partition -> the next offset to read after it (offsets/N)."""
    folder = os.path.join(checkpoint, "offsets")
    ends = []
    for batch in oracle.offset_batches(checkpoint):
        with open(os.path.join(folder, str(batch))) as handle:
            sources = [json.loads(line) for line in handle.read().splitlines()[2:] if line.startswith("{")]
        [offsets] = [s[topic] for s in sources if topic in s]
        ends.append({int(p): o for p, o in offsets.items()})
    return ends


def batches(checkpoint: str, topic: str, every: list[tuple[int, int, int, bytes]],
            source: str | None = None) -> list[list[dict]]:
    """The typed rows each batch read: records between the previous batch's offsets and its own (`source`: the
    input whose schema they have, when the topic is not named after it)."""
    out, start = [], {}
    for end in batch_ends(checkpoint, topic):
        rows = [oracle.parse_line(source or topic, value.decode("utf-8", "replace"), stamp)
                for partition, offset, stamp, value in every if start.get(partition, 0) <= offset < end.get(partition, 0)]
        out.append([r for r in rows if r is not None])
        start = end
    return out


def rejected(topic: str, every) -> list[bytes]:
    """The values of the records the oracle sends to the dead letters, sorted."""
    return sorted(v for _, _, stamp, v in every if oracle.parse_line(topic, v.decode("utf-8", "replace"), stamp) is None)
