"""Deterministic fault injection: named points in the code that kill or freeze their process when asked to.

Crash tests need a crash at an exact place (after the Delta commit of batch 3, before Spark's commit
log), not a random `kill -9` that lands wherever the machine's speed puts it. `STATEOPS_FAULTS` names
the points to fire, separated by `;`, each with optional `key=value` attributes that must all equal
what the point passes (compared as text):

    STATEOPS_FAULTS="sink.after_commit:table=user_activity,batch=3"
    STATEOPS_FAULTS="sink.before_commit:job=order_payments,batch=2;runbook.after_step:step=archive"

A matching point writes one line to stderr and sends SIGKILL to its own process: no `finally`, no
atexit handler, no buffered write runs, as in a power cut. Children that end with their parent go with
it (Spark's JVM exits when the Python driver's pipe closes). A fault fires every time its point is
reached, so the run that restarts after it must not set it. Unset, a point costs one environment lookup.

`then=sleep,seconds=S` pauses the point's thread S seconds and goes on (a slow sink, a slow store: the batch-time
attribution's tests, tests/spark/test_batch_parts.py).
`then=freeze` instead stops the point's whole process group with SIGSTOP (the Python driver and its JVM: a
long GC pause, a stopped container), `then=freeze-python` this process alone (its JVM runs on); whoever sent
the fault sends SIGCONT, and the process goes on from the point as if nothing happened (the fence tests,
tests/e2e/test_fence.py).

Points: `sink.before_commit`, `sink.after_commit` (jobs/runtime/sink.py and, for the dead-letter table,
jobs/runtime/deadletters.py: job, table, batch); `retirement.step` (jobs/runtime/retirement.py: job, step `judged`,
`recorded` or `archived`); `switch.part` (the
runbook's store switch, stateops/recovery/store_switch.py: job, part, n);
`<kind>.after_step` (a step journaled done) and `<kind>.before_done` (a step acted, not yet journaled) of every
runbook on the engine (stateops.runbooks: job, step), kind `runbook` for recovery and `move` for the home move
(whose job is `_home`); `move.copied` (the home move, after each file copied: file, its number); `lease.heartbeat`
(inside the heartbeat's critical section, holding the job's control lock, after its renewal and before the lease
record's write: job, beat).

Two settings that are not points, for the fence tests only: `clock.skew:seconds=S` adds S seconds (may be
negative) to this process's lease clock (the instants it writes into control records and ages them by);
`fence.off` turns the single-writer fence off (a live lease is taken anyway and never found lost, the commit
points are written as Spark and Delta write them by default), so the tests show their checks can fail.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from functools import lru_cache

from stateops import environment
from stateops.errors import ConfigError

ENV = "STATEOPS_FAULTS"


@lru_cache(maxsize=8)
def parse(text: str) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """`name[:k=v,...][;...]` -> ((name, ((k, v), ...)), ...); a malformed entry is a ConfigError."""
    faults = []
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        name, _, rest = entry.partition(":")
        pairs = [pair.strip() for pair in rest.split(",")] if rest.strip() else []
        if not name.strip() or any(pair.count("=") != 1 or pair.startswith("=") for pair in pairs):
            raise ConfigError(ENV, f"{entry!r} is not a fault",
                              "write POINT or POINT:key=value,key=value, faults separated by ';'")
        faults.append((name.strip(), tuple(tuple(p.strip() for p in pair.split("=")) for pair in pairs)))
        then = dict(faults[-1][1]).get("then", "kill")
        if then not in THEN:
            raise ConfigError(ENV, f"{entry!r}: then={then} is not an action", f"use then={' or then='.join(THEN)}")
        if then == "sleep" and not _seconds(dict(faults[-1][1]).get("seconds", "1")):
            raise ConfigError(ENV, f"{entry!r}: seconds must be a number of seconds, 0 or more",
                              "write seconds=S, e.g. then=sleep,seconds=2.5")
    return tuple(faults)


def _seconds(text: str) -> bool:
    try:
        return float(text) >= 0
    except ValueError:
        return False


def fault_point(name: str, **attributes: object) -> None:
    """Kill this process now if `STATEOPS_FAULTS` names this point with matching attributes."""
    text = environment.text(ENV)
    if not text:
        return
    for point, wanted in parse(text):
        if point != name:
            continue
        unknown = sorted(key for key, _ in wanted if key not in attributes and key not in ACTION_KEYS)
        if unknown:
            raise ConfigError(ENV, f"point {name} has no attribute {', '.join(unknown)}",
                              f"match on {', '.join(sorted(attributes)) or 'nothing (write the name alone)'}")
        then = dict(wanted).get("then", "kill")
        if all(str(attributes[key]) == value for key, value in wanted if key not in ACTION_KEYS):
            shown = " ".join(f"{key}={value}" for key, value in attributes.items())
            sys.stderr.write(f"stateops: fault {name} {shown}: {THEN[then][0]} process {os.getpid()}\n")
            sys.stderr.flush()
            THEN[then][1](dict(wanted))


# then=...: what a matching point does (the line it writes, the act)
THEN = {
    "kill": ("killing", lambda wanted: os.kill(os.getpid(), signal.SIGKILL)),
    "freeze": ("freezing the process group of", lambda wanted: os.killpg(os.getpgid(0), signal.SIGSTOP)),
    "freeze-python": ("freezing", lambda wanted: os.kill(os.getpid(), signal.SIGSTOP)),
    "sleep": ("pausing a thread of", lambda wanted: time.sleep(float(wanted.get("seconds", 1)))),
}
ACTION_KEYS = ("then", "seconds")  # a fault's own attributes, not matched against the point's


def _setting(name: str) -> dict[str, str] | None:
    """The attributes of setting `name` in STATEOPS_FAULTS, None when it is not set."""
    text = environment.text(ENV)
    return next((dict(wanted) for point, wanted in parse(text) if point == name), None) if text else None


def clock_skew_seconds() -> float:
    """`clock.skew:seconds=S`: how far this process's lease clock is off (0 unless set)."""
    found = _setting("clock.skew")
    return float(found.get("seconds", 0)) if found else 0.0


def fence_off() -> bool:
    """`fence.off`: the single-writer fence is turned off (the negative control of the fence tests)."""
    return _setting("fence.off") is not None
