"""Who holds a lock or a record: host, pid, and the pid's start time, so a reused pid is not mistaken for the holder.

A lock's record names its holder this way (`identity()`), so that on the holder's own host a process that is gone
frees its lock at once, on every backend alike: the kernel does it for a flock on local disk, `gone()` does it for
an object store's lock (stateops.storage.s3), where a lock otherwise waits out its TTL. A holder on another host is
judged by its lock's age alone.
"""
from __future__ import annotations

import os
import socket
from typing import Any

HOST = socket.gethostname()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22); None if it is gone,
    a zombie, or /proc is not available."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    if fields[0] in ("Z", "X"):  # zombie or dead: killed, not yet reaped
        return None
    return int(fields[19])


def alive(pid: int, started: int | None) -> bool:
    """On this host: is `pid` running, and is it the process that started at `started` ticks?"""
    if os.path.exists("/proc/self/stat"):
        ticks = start_ticks(pid)
        return ticks is not None and (started is None or ticks == started)
    try:  # no /proc (macOS): existence only
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def identity() -> dict[str, Any]:
    """This process as a lock's record names it."""
    return {"host": HOST, "pid": os.getpid(), "pid_started": start_ticks(os.getpid())}


def gone(holder: dict[str, Any]) -> bool:
    """The holder's process ran on this host and runs no more (killed, crashed; its pid reused by another process
    counts as gone when the record has the start time): its lock is free at once."""
    pid = holder.get("pid")
    if holder.get("host") != HOST or not isinstance(pid, int) or pid <= 0:
        return False
    started = holder.get("pid_started")
    return not alive(pid, started if isinstance(started, int) else None)
