"""One retention run per root at a time: an exclusive lock per root, held for the whole run.

The locks live in the control home (STATEOPS_CONTROL_HOME, else STATEOPS_HOME), one per root under
`ops/_retention/locks/`, whatever storage the root itself is on (local disk, s3://...). A run takes each root's
lock without waiting (in sorted order, so two runs over shared roots meet at the same first one), is refused at
once in one line naming the holder (run id, pid, host, actor, since: the record the holder writes into its lock)
while another run holds one, and keeps them until it ends. The locks are the storage layer's
(stateops.storage.locks), renewed every LOCK_TTL_SECONDS / 4 by a heartbeat: on local or POSIX shared storage a
flock the kernel releases when the process dies, so a crashed run never leaves a lock behind; on S3 a lock object,
which a run that died leaves behind until it is LOCK_TTL_SECONDS old by the server's clock and taken over (one
taker wins), so a later run waits for that at most. On both, a run that stopped without dying (frozen, cut off from
the store) loses its lock once it has not renewed it for LOCK_TTL_SECONDS, and then follows the runbook engine's
rule (stateops.runbooks.holding): it stops before its next item, says so in one line, and its journal (`actions`)
records it. Other object stores have no atomic create here: such a control home is refused in one line.
"""
from __future__ import annotations

import hashlib
import posixpath
from contextlib import contextmanager
from typing import Callable, Iterator

from stateops.control.store import control_variable, lockable_home
from stateops.errors import StateOpsError
from stateops.layout import Layout, Part
from stateops.runbooks import Holding
from stateops.storage import LockBusy, lock_at

LOCK_TTL_SECONDS = 60.0  # a lock not renewed for this long was left by a run that died or stopped


class RetentionLockedError(StateOpsError):
    """Another retention run holds a root."""


def lock_path(layout: Layout, root: str) -> str:
    """The root's lock in the control home: a local path, or an s3:// / s3a:// URL."""
    home = lockable_home(layout.control_home, control_variable(layout), user="retention's lock per root")
    name = hashlib.sha256(root.rstrip("/").encode()).hexdigest()[:24] + ".lock"
    return posixpath.join(Layout(home).folder(Part.RETENTION_LOCKS), name)


def _locked(root: str, busy: LockBusy) -> RetentionLockedError:
    record = busy.holder
    holder = (f"run {record.get('run_id')} (pid {record.get('pid')} on {record.get('host')}, by {record.get('actor')}, "
              f"since {record.get('since')})" if record else "another run (no details recorded yet)")
    return RetentionLockedError(
        f"another retention run holds {root}: {holder}. Fix: wait for it to finish (one retention run per root at "
        f"a time); a run that died or stopped releases its lock by itself once {busy.ttl:g} s without renewal")


@contextmanager
def hold(layout: Layout, roots: tuple[str, ...], *, run_id: str, actor: str,
         on_lost: Callable[[str, str], None] | None = None) -> Iterator[Holding]:
    """Hold every root's lock for the block; RetentionLockedError (one line) when a root is held. The block calls
    `ensure_held(item)` before each item (RunbookStopped once a lock was lost; `on_lost(item, line)` told once)."""
    holding = Holding(f"retention run {run_id}", on_lost=on_lost,
                      fix="see which run holds the roots now (its actions: stateops retention plan shows the plan "
                          "as it is now), then apply again")
    with holding.held():
        for root in sorted(set(roots)):
            lock = lock_at(lock_path(layout, root), ttl=LOCK_TTL_SECONDS, heartbeat=True, name="retention lock")
            holding.take(lock, {"root": root, "run_id": run_id, "actor": actor},
                         busy=lambda busy, root=root: _locked(root, busy))
        yield holding
