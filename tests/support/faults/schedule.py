"""A randomized fault schedule, built from a seed: which fault hits which process, at which batch, for how long.

Why seeded: the nightly run draws many schedules (FENCING-NOTES.md section 6: 100 trials to catch a failure mode
of 3 % per trial), and a failing trial must be replayable exactly: the seed and its parameters are the whole
schedule, and `describe()` prints them with the fault in words, beside the proxy logs, in the failure message.
The targeted scenarios (one hand-picked fault each) build a Schedule directly from `Fault`s.

Durations scale with the lease's TTL, on both sides of it: a pause shorter than the TTL must be harmless (a
control), a longer one forces a takeover. The driver of a trial injects each fault once the target's
`offsets/<at_batch>` has landed (the proxy's `wait_for`), `after` seconds later; a hold instead catches the
target's next matching request from that moment on (`HOLD_TARGETS`).
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

KINDS = ("freeze-group", "freeze-python", "hold-delta-commit", "hold-offsets", "hold-commits", "partition", "slow",
         "skew", "crash")
# What a hold catches at the target's proxy: (method, key regex); PUT covers S3A's rename (a CopyObject is a PUT).
HOLD_TARGETS = {
    "hold-delta-commit": ("PUT", r"/_delta_log/\d{20}\.json$"),
    "hold-offsets": ("PUT", r"/offsets/\d+$"),
    "hold-commits": ("PUT", r"/commits/\d+$"),
}
# Each kind's duration (and magnitude) as multiples of the TTL: (low, high), drawn uniformly.
DURATION_TTLS = {"freeze-group": (0.5, 3.0), "freeze-python": (0.5, 3.0), "hold-delta-commit": (0.5, 3.0),
                 "hold-offsets": (0.5, 3.0), "hold-commits": (0.5, 3.0), "partition": (0.5, 3.0),
                 "slow": (1.0, 3.0), "skew": (0.0, 0.0), "crash": (0.0, 2.0)}
MAGNITUDE_TTLS = {"slow": (0.5, 1.5), "skew": (1.0, 3.0)}
WHAT = {
    "freeze-group": "SIGSTOP the driver and its JVM, SIGCONT after",
    "freeze-python": "SIGSTOP the Python driver only (its JVM keeps running), SIGCONT after",
    "hold-delta-commit": "hold its next PUT of _delta_log/N.json at its proxy, release after",
    "hold-offsets": "hold its next PUT of offsets/N at its proxy, release after",
    "hold-commits": "hold its next PUT of commits/N at its proxy, release after",
    "partition": "refuse every request at its proxy (connection reset), heal after",
    "slow": "delay every request at its proxy by `magnitude` seconds, for",
    "skew": "run it with its clock offset by `magnitude` seconds (libfaketime, Python only), from its start",
    "crash": "SIGKILL its process group, restart it after",
}


@dataclass(frozen=True)
class Fault:
    """One fault: `kind` on process `target`, injected `after` seconds once its offsets/<at_batch> landed, lasting
    `duration` seconds; `magnitude` is the per-request delay of `slow` and the clock offset of `skew` (else 0)."""

    kind: str
    target: str
    at_batch: int
    after: float
    duration: float
    magnitude: float = 0.0

    def describe(self, ttl: float | None = None) -> str:
        scale = (lambda s: f"{s:.3f}s ({s / ttl:.2f}x TTL)") if ttl else (lambda s: f"{s:.3f}s")
        text = f"{self.target}: {self.kind} at batch {self.at_batch} (+{self.after:.3f}s): {WHAT[self.kind]}"
        if self.magnitude:
            text += f"; magnitude {scale(self.magnitude)}"
        if self.kind != "skew":
            text += f"; duration {scale(self.duration)}"
        if self.kind in HOLD_TARGETS:
            method, regex = HOLD_TARGETS[self.kind]
            text += f"; matches {method} {regex}"
        return text


@dataclass(frozen=True)
class Schedule:
    """The faults of one trial, in the order they are injected, and how they were drawn."""

    seed: int | None
    faults: tuple[Fault, ...]
    ttl: float | None = None
    drawn_with: dict = field(default_factory=dict, compare=False)

    @classmethod
    def from_seed(cls, seed: int, *, batches: int = 20, ttl: float = 6.0, faults: int = 1,
                  kinds: tuple[str, ...] = KINDS, targets: tuple[str, ...] = ("A",)) -> "Schedule":
        """`faults` faults drawn with random.Random(seed): a kind of `kinds`, a target of `targets`, a batch in
        1..batches-2 (a fault lands mid-run, with batches left after it), a moment up to half a TTL after it,
        a duration and a magnitude from the kind's ranges (DURATION_TTLS, MAGNITUDE_TTLS) times `ttl`."""
        unknown = set(kinds) - set(KINDS)
        if unknown or batches < 3:
            raise ValueError(f"unknown kinds {sorted(unknown)}" if unknown else "batches must be at least 3")
        rng = random.Random(seed)
        drawn = []
        for _ in range(faults):
            kind = rng.choice(kinds)
            low, high = DURATION_TTLS[kind]
            magnitude = 0.0
            if kind in MAGNITUDE_TTLS:
                mag_low, mag_high = MAGNITUDE_TTLS[kind]
                magnitude = rng.uniform(mag_low, mag_high) * ttl * (rng.choice((-1, 1)) if kind == "skew" else 1)
            drawn.append(Fault(kind=kind, target=rng.choice(targets), at_batch=rng.randint(1, batches - 2),
                               after=0.0 if kind in HOLD_TARGETS else round(rng.uniform(0, ttl / 2), 3),
                               duration=round(rng.uniform(low, high) * ttl, 3), magnitude=round(magnitude, 3)))
        drawn.sort(key=lambda f: (f.at_batch, f.after))
        params = {"batches": batches, "ttl": ttl, "faults": faults, "kinds": tuple(kinds), "targets": tuple(targets)}
        return cls(seed, tuple(drawn), ttl, params)

    def describe(self) -> str:
        """The schedule in words, with what reproduces it; printed on failure beside the proxy logs."""
        if self.seed is not None:
            args = ", ".join(f"{k}={v!r}" for k, v in self.drawn_with.items())
            head = f"Schedule seed={self.seed} (replay: Schedule.from_seed({self.seed}, {args}))"
        else:
            head = f"Schedule (targeted): {[asdict(f) for f in self.faults]}"
        lines = [f"  {n}. {fault.describe(self.ttl)}" for n, fault in enumerate(self.faults, 1)]
        return "\n".join([head, *(lines or ["  (no faults)"])])
