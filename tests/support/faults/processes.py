"""A StateOps process under test (e.g. `.venv/bin/stateops jobs run JOB --mode continuous`) that the fault
harness can pause, resume and kill, whole or in part.

Why each piece:
- Its own session and process group (`start_new_session`), so that SIGSTOP/SIGKILL of the group reaches the Python
  driver and the JVM pyspark starts for it (spark-submit's java is a child in the same group) and nothing of the
  test's own process.
- Two freeze scopes: "group" pauses the whole process (a GC pause, a laptop lid, a swapped-out VM); "python" stops
  only the Python driver while its JVM keeps running: the lease heartbeat (Python) lapses while the JVM can keep
  committing, a distinct and nastier fault (a driver paused by its host while the executors it started work on).
  "group" also stops descendants that left the group (pyspark's Python worker daemon calls setpgid for itself).
- Output to a file rather than a pipe: a stopped test never blocks a chatty child on a full pipe, and the file is
  there to print when an assertion fails.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

SCOPES = ("group", "python")
KILL_WAIT = 10.0


@dataclass
class StartedProcess:
    """A command started by `start`: its Popen, the file holding its stdout and stderr, its process group."""

    popen: subprocess.Popen
    output_path: str
    command: tuple[str, ...]

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def pgid(self) -> int:
        return self.popen.pid  # the session leader's pid is its group's id

    def output(self) -> str:
        with open(self.output_path, errors="replace") as handle:
            return handle.read()


def start(command: Sequence[str], output_path: str, env: Mapping[str, str] | None = None,
          cwd: str | None = None) -> StartedProcess:
    """Start `command` in a new session (its own process group), stdout and stderr appended to `output_path`."""
    with open(output_path, "ab") as output:
        popen = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                 env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True)
    return StartedProcess(popen, output_path, tuple(command))


def _children() -> dict[int, list[int]]:
    """ppid -> child pids, read from /proc (processes that vanish while reading are skipped)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as handle:
                    stat = handle.read()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the command name may hold spaces and parentheses
            children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, parents before children."""
    children, found, queue = _children(), [], [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def _command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def jvm_pid(proc: StartedProcess | int, timeout: float = 0.0) -> int | None:
    """The pid of the JVM under `proc` (a started process, or any pid: the test's own for its Spark session),
    the first descendant whose command is `java`, waiting up to `timeout` seconds for pyspark to start it; None
    if there is none by then."""
    pid = proc if isinstance(proc, int) else proc.pid
    deadline = time.monotonic() + timeout
    while True:
        found = next((child for child in descendants(pid) if _command_name(child) == "java"), None)
        exited = not isinstance(proc, int) and proc.popen.poll() is not None
        if found is not None or exited or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


def state(pid: int) -> str:
    """The kernel's state letter of `pid` ('T' when stopped, 'S' sleeping, 'R' running, 'Z' zombie; '' if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _signal_scope(proc: StartedProcess, scope: str, signum: int) -> None:
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, not {scope!r}")
    alive = proc.popen.poll() is None  # once reaped, its pid may be another process's: never signal it then
    if scope == "python":
        if not alive:
            raise ProcessLookupError(f"pid {proc.pid} exited with code {proc.popen.returncode}")
        os.kill(proc.pid, signum)
        return
    strays = [pid for pid in descendants(proc.pid) if _pgid(pid) not in (None, proc.pgid)] if alive else []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pgid, signum)
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def freeze(proc: StartedProcess, scope: str = "group") -> None:
    """SIGSTOP: "group" = the driver, its JVM and every descendant; "python" = the Python process only."""
    _signal_scope(proc, scope, signal.SIGSTOP)


def thaw(proc: StartedProcess, scope: str = "group") -> None:
    """SIGCONT to what `freeze(proc, scope)` stopped."""
    _signal_scope(proc, scope, signal.SIGCONT)


def crash(proc: StartedProcess) -> None:
    """SIGKILL the whole group and its strays (the "crash" fault: no shutdown hook, no finally)."""
    _signal_scope(proc, "group", signal.SIGKILL)


def wait_exit(proc: StartedProcess, timeout: float) -> tuple[int, str]:
    """(exit code, output) once the process has exited; TimeoutError (with the output's tail) if it has not by
    then. A negative code is the signal that ended it."""
    try:
        code = proc.popen.wait(timeout)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"{' '.join(proc.command)} (pid {proc.pid}) still running after {timeout}s; output tail:\n"
                           f"{proc.output()[-4000:]}") from None
    return code, proc.output()


@contextlib.contextmanager
def running(command: Sequence[str], output_path: str, env: Mapping[str, str] | None = None,
            cwd: str | None = None) -> Iterator[StartedProcess]:
    """`start`, and on leaving, whatever happened: SIGCONT then SIGKILL of the group and its strays (a frozen
    process left behind would hold its ports, its files and a CPU's worth of nothing)."""
    proc = start(command, output_path, env, cwd)
    try:
        yield proc
    finally:
        thaw(proc, "group")  # the group outlives its leader while a member (the JVM) lives
        crash(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(KILL_WAIT)


def terminate_group(popen: subprocess.Popen, wait: float) -> None:
    """SIGTERM to the process group `popen` leads (started in a session of its own), SIGKILL if it has not ended
    within `wait` seconds; nothing when it has already ended."""
    if popen.poll() is not None:
        return
    os.killpg(popen.pid, signal.SIGTERM)
    try:
        popen.wait(wait)
    except subprocess.TimeoutExpired:
        os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(30)
