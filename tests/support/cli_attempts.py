"""One `stateops` command in a process (and process group) of its own, optionally with a fault point armed
(STATEOPS_FAULTS, stateops/faults.py): the runbooks' kill trials run the same command again and again, each attempt a
new process, as an operator would after a crash."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from stateops.faults import ENV

BIN = os.path.dirname(sys.executable)


def attempt(home: str, command: list[str], fault: str | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run `stateops COMMAND` on `home` with `fault` armed (none: the inherited setting removed); its exit code
    (-SIGKILL when the fault fired) and output. Whatever its group left behind (its JVM) is killed after."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env.update({"STATEOPS_HOME": home, **({ENV: fault} if fault else {})})
    proc = subprocess.Popen([f"{BIN}/stateops", *command], env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its JVM, if the fault left one behind
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
