"""Deterministic fault injection: named points in the code that kill their process when asked to.

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

Points: `sink.before_commit`, `sink.after_commit` (jobs/runtime/sink.py: job, table, batch);
`runbook.after_step` (a step journaled done) and `runbook.before_done` (a step acted, not yet journaled)
(stateops/recovery: job, step).
"""
from __future__ import annotations

import os
import signal
import sys
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
    return tuple(faults)


def fault_point(name: str, **attributes: object) -> None:
    """Kill this process now if `STATEOPS_FAULTS` names this point with matching attributes."""
    text = environment.text(ENV)
    if not text:
        return
    for point, wanted in parse(text):
        if point != name:
            continue
        unknown = sorted(key for key, _ in wanted if key not in attributes)
        if unknown:
            raise ConfigError(ENV, f"point {name} has no attribute {', '.join(unknown)}",
                              f"match on {', '.join(sorted(attributes)) or 'nothing (write the name alone)'}")
        if all(str(attributes[key]) == value for key, value in wanted):
            shown = " ".join(f"{key}={value}" for key, value in attributes.items())
            sys.stderr.write(f"stateops: fault {name} {shown}: killing process {os.getpid()}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
