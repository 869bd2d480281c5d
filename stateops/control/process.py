"""Who holds something: host, pid, and the pid's start time, so a reused pid is not mistaken for the holder."""
from __future__ import annotations

import getpass
import os
import socket

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


def default_actor() -> str:
    """Who acts, when the caller does not say: user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{HOST}"
