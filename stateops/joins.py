"""The time bound of a stream-stream join, which the state does not record but two tools need.

A join condition such as `p.time BETWEEN o.time AND o.time + INTERVAL 5 MINUTES` reads
`lower <= right_time - left_time <= upper`. Spark keeps a row in join state while a future row of the
other side could still match it: a left row until the watermark passes `left_time + upper`, a right row
until it passes `right_time - lower`. The audit uses that to tell overdue rows from waiting ones, and
explain-key to tell late input from input that waits for its match.
"""
from __future__ import annotations

from dataclasses import dataclass

SIDES = ("left", "right")


@dataclass(frozen=True)
class JoinBound:
    """lower_seconds <= right_time - left_time <= upper_seconds."""

    lower_seconds: int
    upper_seconds: int

    def wait_seconds(self, side: str) -> int:
        """How far behind the watermark a row of `side` may lie and still find a match (negative: the row
        is useless before the watermark reaches it)."""
        if side not in SIDES:
            raise ValueError(f"join side {side!r} is not one of {SIDES}")
        return self.upper_seconds if side == "left" else -self.lower_seconds
