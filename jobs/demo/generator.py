"""Deterministic event files for the landing zone, with the knobs that make state misbehave.

Each file holds one slice of event time (`minutes_per_file`) and becomes one micro-batch (the jobs read
one file per trigger), so a given seed and config always yields the same batches. Knobs: hot-key share
(skew from one key), clustered share (skew across many keys: event ids that hash to one partition), late
events (share, minutes behind), duplicates, malformed lines, and the order/payment cases: payment never arrives, payment arrives too late (after the watermark passed it), payment outside the
5-minute bound; and poison timestamps (extra rows stamped in 2099, which the jobs must dead-letter). A
manifest `_generator.json` (ignored by Spark: leading underscore) lists the cases.
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone

from stateops.errors import ConfigError
from stateops.storage import filesystem
from stateops.hashing import spark_partition
from stateops.timefmt import iso_millis
from stateops.layout import Layout

HOT_USER = "u0000"
ACTIONS = ("view", "click", "cart", "buy")
PAYMENT_CASES = ("paid", "never_paid", "paid_too_late", "paid_out_of_bounds")
FAR_FUTURE = datetime(2099, 1, 1, tzinfo=timezone.utc)


def _malformed(rng: random.Random, record: dict, time_key: str) -> str:
    """One bad line derived from a real record: not JSON, a field missing, a bad timestamp, or cut short."""
    kind = rng.randrange(4)
    if kind == 0:
        return "{not json at all"
    if kind == 1:
        return json.dumps(dict(list(record.items())[1:]))
    if kind == 2:
        return json.dumps({**record, time_key: "yesterday-ish"})
    text = json.dumps(record)
    return text[: len(text) // 2]


def _poisoned(record: dict, id_key: str, time_key: str, offset: timedelta) -> str:
    """A copy of a real record under a new id, its time moved to 2099 (a time that parses but is absurd)."""
    return json.dumps({**record, id_key: f"{record[id_key]}-future", time_key: iso_millis(FAR_FUTURE + abs(offset))})


@dataclass(frozen=True)
class GeneratorConfig:
    events: int = field(default=2000, metadata={"help": "events in all (one user event per line)"})
    files: int = field(default=8, metadata={"help": "files per source; each file is one micro-batch"})
    users: int = field(default=50, metadata={"help": "distinct users"})
    start: str = field(default="2026-01-01T00:00:00+00:00", metadata={"help": "event time of the first slice (ISO)"})
    minutes_per_file: int = field(default=10, metadata={"help": "event-time span of each file"})
    hot_key_share: float = field(default=0.0, metadata={"help": "share of events for one hot user (skew)"})
    clustered_share: float = field(default=0.0, metadata={
        "help": "share of events whose event id hashes to partition 0 of --clustered-partitions (Spark's murmur3): "
                "skew across many keys in the dedup state"})
    clustered_partitions: int = field(default=4, metadata={"help": "shuffle partitions the clustered ids collide on"})
    late_share: float = field(default=0.0, metadata={"help": "share of events written late, from the third file on"})
    late_minutes: int = field(default=90, metadata={"help": "how far behind its file a late event is"})
    duplicate_share: float = field(default=0.0, metadata={"help": "share of events sent twice (same or next file)"})
    malformed_share: float = field(default=0.0, metadata={"help": "share of extra malformed lines (dead letters)"})
    future_share: float = field(default=0.0, metadata={
        "help": "share of extra rows stamped in 2099 (poison timestamps: dead letters), from the second file on"})
    orders: int = field(default=0, metadata={"help": "orders to generate (with payments)"})
    first_order: int = field(default=0, metadata={"help": "number of the first order (and payment): input generated "
                                                          "in several runs keeps its ids apart"})
    never_paid_share: float = field(default=0.1, metadata={"help": "orders whose payment never arrives"})
    paid_too_late_share: float = field(default=0.1, metadata={"help": "orders whose payment lands three batches late"})
    paid_out_of_bounds_share: float = field(default=0.1, metadata={"help": "orders paid 6-9 minutes later (bound: 5)"})
    seed: int = field(default=7, metadata={"help": "random seed: same seed, same files"})

    def validated(self) -> "GeneratorConfig":
        for name in ("events", "orders"):
            if getattr(self, name) < 0:
                raise ConfigError(name, "must not be negative", "use 0 or more")
        for name in ("files", "users", "minutes_per_file", "late_minutes", "clustered_partitions"):
            if getattr(self, name) < 1:
                raise ConfigError(name, "must be at least 1", "use a positive whole number")
        for name in ("hot_key_share", "clustered_share", "late_share", "duplicate_share", "malformed_share", "future_share",
                     "never_paid_share", "paid_too_late_share", "paid_out_of_bounds_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, f"{getattr(self, name)} is not a share", "use a number from 0 to 1")
        if self.never_paid_share + self.paid_too_late_share + self.paid_out_of_bounds_share > 1.0:
            raise ConfigError("never_paid_share", "the three payment-case shares add up to more than 1",
                              "lower them so their sum is at most 1")
        try:
            datetime.fromisoformat(self.start)
        except ValueError:
            raise ConfigError("start", f"{self.start!r} is not an ISO timestamp",
                              "use e.g. 2026-01-01T00:00:00+00:00") from None
        return self


# The demo's input (`stateops demo`, `bash scripts/demo`): six 15-minute files, a little of every kind of trouble.
DEMO_INPUT = GeneratorConfig(events=4000, files=6, users=600, minutes_per_file=15, hot_key_share=0.05,
                             late_share=0.03, duplicate_share=0.05, malformed_share=0.01, orders=300, seed=42)


@dataclass
class Generated:
    files: dict[str, list[str]] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    payment_cases: dict[str, str] = field(default_factory=dict)


class _Slices:
    """Lines per file index for one landing source."""

    def __init__(self, files: int):
        self.by_file: list[list[str]] = [[] for _ in range(files)]

    def add(self, index: int, line: str) -> None:
        self.by_file[min(index, len(self.by_file) - 1)].append(line)


def _clustered(event_id: str, partitions: int) -> str:
    """`event_id` with the first suffix that Spark's hash partitioning sends to partition 0 of `partitions`:
    many distinct keys on one partition, which another partition count spreads (unlike one hot key)."""
    n = 0
    while spark_partition(f"{event_id}-c{n}", partitions) != 0:
        n += 1
    return f"{event_id}-c{n}"


def _events(cfg: GeneratorConfig, rng: random.Random, t0: datetime, span: timedelta) -> _Slices:
    out = _Slices(cfg.files)
    per_file = cfg.events // cfg.files
    for i in range(cfg.files):
        count = per_file + (1 if i < cfg.events % cfg.files else 0)
        for k in range(count):
            user = HOT_USER if rng.random() < cfg.hot_key_share else f"u{rng.randrange(1, cfg.users + 1):04d}"
            moment = t0 + i * span + timedelta(milliseconds=rng.randrange(int(span.total_seconds() * 1000)))
            # Too-late events only from the third file on, once a watermark exists to be late against.
            if i >= 2 and rng.random() < cfg.late_share:
                moment = t0 + i * span - timedelta(minutes=cfg.late_minutes, milliseconds=rng.randrange(60_000))
            event_id = f"e{i:04d}-{k:06d}"
            if cfg.clustered_share and rng.random() < cfg.clustered_share:
                event_id = _clustered(event_id, cfg.clustered_partitions)
            record = {"event_id": event_id, "user_id": user, "event_time": iso_millis(moment),
                      "action": rng.choice(ACTIONS), "value": float(rng.randrange(1, 101))}
            line = json.dumps(record)
            out.add(i, line)
            if rng.random() < cfg.duplicate_share:
                out.add(i + rng.randrange(2), line)  # same file or the next one
            if rng.random() < cfg.malformed_share:
                out.add(i, _malformed(rng, record, "event_time"))
            if cfg.future_share and i >= 1 and rng.random() < cfg.future_share:
                out.add(i, _poisoned(record, "event_id", "event_time", moment - t0))
    return out


def _orders(cfg: GeneratorConfig, rng: random.Random, t0: datetime, span: timedelta, gen: Generated
            ) -> tuple[_Slices, _Slices]:
    orders, payments = _Slices(cfg.files), _Slices(cfg.files)
    span_ms = int(span.total_seconds() * 1000)
    for n in range(cfg.orders):
        i = n * cfg.files // max(cfg.orders, 1)
        order_id = f"o{cfg.first_order + n:06d}"
        order_time = t0 + i * span + timedelta(milliseconds=rng.randrange(span_ms))
        order = {"order_id": order_id, "user_id": f"u{rng.randrange(1, cfg.users + 1):04d}",
                 "order_time": iso_millis(order_time), "amount": float(rng.randrange(5, 500))}
        orders.add(i, json.dumps(order))
        if cfg.malformed_share and rng.random() < cfg.malformed_share:
            orders.add(i, _malformed(rng, order, "order_time"))
        if cfg.future_share and i >= 1 and rng.random() < cfg.future_share:
            orders.add(i, _poisoned(order, "order_id", "order_time", order_time - t0))
        roll = rng.random()
        if roll < cfg.never_paid_share:
            case = "never_paid"
        elif roll < cfg.never_paid_share + cfg.paid_too_late_share and i + 3 < cfg.files:
            case = "paid_too_late"
        elif roll < cfg.never_paid_share + cfg.paid_too_late_share + cfg.paid_out_of_bounds_share:
            case = "paid_out_of_bounds"
        else:
            case = "paid"
        gen.payment_cases[order_id] = case
        if case == "never_paid":
            continue
        if case == "paid_out_of_bounds":
            pay_time = order_time + timedelta(seconds=rng.randrange(6 * 60, 9 * 60))
        else:
            pay_time = order_time + timedelta(seconds=rng.randrange(5, 4 * 60))
        # Files hold event-time slices; a too-late payment lands three slices later than its time.
        index = int((pay_time - t0) / span) + (3 if case == "paid_too_late" else 0)
        payment = {"payment_id": f"p{cfg.first_order + n:06d}", "order_id": order_id, "payment_time": iso_millis(pay_time),
                   "amount": float(rng.randrange(5, 500))}
        payments.add(index, json.dumps(payment))
        if cfg.future_share and index >= 1 and rng.random() < cfg.future_share:
            payments.add(index, _poisoned(payment, "payment_id", "payment_time", pay_time - t0))
    return orders, payments


def _write(layout: Layout, source: str, slices: _Slices, tag: str, rng: random.Random, gen: Generated) -> None:
    """Write one file per slice; modification times increase so Spark reads them in slice order."""
    fs, root = filesystem(layout.landing(source))
    fs.makedirs(root, exist_ok=True)
    mtime = time.time()
    local = "file" in fs.protocol
    if local:
        existing = [os.path.getmtime(os.path.join(root, f)) for f in os.listdir(root)]
        mtime = max([mtime, *[m + 1 for m in existing]])
    for index, lines in enumerate(slices.by_file):
        rng.shuffle(lines)
        name = f"{source}-{tag}-{index:05d}.json"
        tmp, final = f"{root}/.{name}.tmp", f"{root}/{name}"
        with fs.open(tmp, "w") as handle:
            handle.write("\n".join(lines) + ("\n" if lines else ""))
        fs.mv(tmp, final)
        if local:
            os.utime(final, (mtime + index, mtime + index))
        gen.files.setdefault(source, []).append(final if local else fs.unstrip_protocol(final))  # a URL off local disk
        gen.lines[source] = gen.lines.get(source, 0) + len(lines)


def generate(layout: Layout, cfg: GeneratorConfig) -> Generated:
    """Write the events (and orders/payments when cfg.orders > 0) into the landing zone."""
    cfg = cfg.validated()
    rng = random.Random(cfg.seed)
    t0 = datetime.fromisoformat(cfg.start)
    t0 = t0 if t0.tzinfo else t0.replace(tzinfo=timezone.utc)
    span = timedelta(minutes=cfg.minutes_per_file)
    tag = t0.strftime("%Y%m%dT%H%M%S")
    gen = Generated()
    if cfg.events:
        _write(layout, "events", _events(cfg, rng, t0, span), tag, rng, gen)
    if cfg.orders:
        orders, payments = _orders(cfg, rng, t0, span, gen)
        _write(layout, "orders", orders, tag, rng, gen)
        _write(layout, "payments", payments, tag, rng, gen)
    fs, root = filesystem(layout.home)
    fs.makedirs(f"{root}/landing", exist_ok=True)
    with fs.open(f"{root}/landing/_generator-{tag}.json", "w") as handle:
        json.dump({"config": asdict(cfg), "payment_cases": gen.payment_cases, "lines": gen.lines}, handle,
                  indent=1, sort_keys=True)
    return gen
