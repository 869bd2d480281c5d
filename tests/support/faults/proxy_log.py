"""The fault proxy's record of every request it received, in order: who sent it (the proxy's label names the
process it serves), what it touched, what the proxy did with it and when.

This is the history a fencing test judges: "every successful write to `offsets/N` came from one writer", "writer A
sent nothing after it lost the lease", and, printed beside a failing assertion, what happened around the fault.
Times are `time.monotonic()` of the test process (every proxy of a test shares that clock, so the logs of two
proxies merge into one timeline); `wall_received` is `time.time()`, to set against S3's LastModified.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable, Sequence

# What the proxy did with a request. `pending` only while it is being held, delayed or forwarded.
FORWARDED, DROPPED, REFUSED, PENDING = "forwarded", "dropped", "refused", "pending"
# Methods that change the store (a POST is CreateMultipartUpload, CompleteMultipartUpload or DeleteObjects).
MUTATING = frozenset({"PUT", "POST", "DELETE"})


@dataclass
class Entry:
    """One request as the proxy saw it. `status` is the store's answer (None when the proxy answered itself with
    a connection reset, or the store could not be reached: see `error`). `held_seconds` counts a hold,
    `delayed_seconds` a `delay` fault."""

    seq: int
    label: str
    method: str
    key: str  # bucket/key, plus a multipart marker (tests/support/faults/s3_operations.py)
    query: str
    operation: str
    t_received: float  # monotonic, once the whole request (head and body) was read
    wall_received: float
    size: int  # request body bytes as received (encoded: aws-chunked bodies count their framing)
    condition: str | None = None  # If-None-Match / If-Match, when the write was conditional
    copy_source: str | None = None  # x-amz-copy-source of a CopyObject (S3A's rename = copy + delete)
    framing: tuple[str, ...] = ()
    client_port: int | None = None  # the client's side of its connection: equal ports = a kept-alive connection
    status: int | None = None
    t_answered: float | None = None  # monotonic, when the answer was decided: the store's came back, or the reset
    held_seconds: float = 0.0
    delayed_seconds: float = 0.0
    outcome: str = PENDING
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def landed(self) -> bool:
        """The store accepted it (forwarded and answered 2xx)."""
        return self.outcome == FORWARDED and self.status is not None and 200 <= self.status < 300

    @property
    def mutating(self) -> bool:
        return self.method in MUTATING

    def snapshot(self) -> "Entry":
        """A copy that the proxy's thread will not change afterwards."""
        return dataclasses.replace(self, notes=list(self.notes))


def render(entries: Iterable[Entry], origin: float | None = None) -> str:
    """One line per request, ordered by receipt: times in seconds after `origin` (default: the first request)."""
    ordered: Sequence[Entry] = sorted(entries, key=lambda e: (e.t_received, e.label, e.seq))
    if not ordered:
        return "(no requests)"
    origin = ordered[0].t_received if origin is None else origin
    lines = []
    for e in ordered:
        answered = "-" if e.t_answered is None else f"{e.t_answered - origin:+.3f}"
        extras = [text for text in (
            e.condition and f"[{e.condition}]",
            e.copy_source and f"[from {e.copy_source}]",
            e.held_seconds and f"held {e.held_seconds:.3f}s",
            e.delayed_seconds and f"delayed {e.delayed_seconds:.3f}s",
            e.error and f"error: {e.error}",
            *e.notes,
        ) if text]
        query = f"?{e.query}" if e.query else ""
        lines.append(f"{e.t_received - origin:+9.3f} {e.label:>4} #{e.seq:<4} {e.method:<6} {e.operation:<23} "
                     f"{e.key}{query if len(query) < 60 else query[:57] + '...'}  -> {e.status or '---'} "
                     f"{e.outcome} (answered {answered}) {' '.join(extras)}".rstrip())
    return "\n".join(lines)
