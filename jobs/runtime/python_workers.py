"""Spark's Python workers on a local master, started without pyspark.zip ahead of the installed pyspark.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on every Python worker's PYTHONPATH
(PythonUtils.sparkPythonPath). With pyspark installed by pip, SPARK_HOME is that installed package, so the zip holds
the very code the interpreter imports from site-packages, but as sources only, which zipimport compiles again in
every worker it starts: importing transformWithStateInPandas' driver-side worker measured 1.5-1.8 s of CPU from the
zip and 0.35 s from site-packages. Spark gives that driver-side worker a fixed 10 s to connect back
(PythonWorkerFactory.createSimpleWorker); on a loaded machine (the fleet soak: a load average of 45 on 2 cores) the
user's job failed every start for 53 minutes.

On a local master the workers run this interpreter, so a launcher that removes that one entry (only the zip of the
pyspark this interpreter imports: a SPARK_HOME of another installation keeps its own) and runs the same interpreter
changes nothing but the time. On a cluster the executors' machines need their own Python: the interpreter is used
as it is.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

LAUNCHER = """#!/bin/sh
# StateOps' launcher of Spark's Python workers on a local master (stateops.jobs.runtime.python_workers): this
# interpreter, without its own pyspark's pyspark.zip on PYTHONPATH (compiled again by every worker otherwise).
zip='{zip}'
case ":$PYTHONPATH:" in
  *":$zip:"*)
    p=":$PYTHONPATH:"
    p="${{p%%:"$zip":*}}:${{p#*:"$zip":}}"
    p="${{p#:}}"
    PYTHONPATH="${{p%:}}"
    export PYTHONPATH;;
esac
exec '{python}' "$@"
"""


def _own_zip() -> str | None:
    """The pyspark.zip of the pyspark this interpreter imports (found without importing it), where there is one."""
    found = importlib.util.find_spec("pyspark")
    if found is None or not found.origin:
        return None
    path = os.path.join(os.path.dirname(found.origin), "python", "lib", "pyspark.zip")
    return path if os.path.isfile(path) else None


def worker_python(master: str) -> str:
    """The Python executable Spark's workers are to run: the launcher on a local master where the installed
    pyspark has its zip (a path in the user's cache, written by `install`), else this interpreter."""
    zip_path = _own_zip()
    if not master.startswith("local") or zip_path is None or "'" in zip_path + sys.executable:
        return sys.executable
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(f"{sys.executable}\0{zip_path}".encode()).hexdigest()[:16]
    return os.path.join(cache, "stateops", "python", key, "python")


def install(executable: str) -> bool:
    """Write the launcher `worker_python` named, atomically, once; False where it cannot be written (a read-only
    home: the workers then run the interpreter as they always did)."""
    if executable == sys.executable or os.path.exists(executable):
        return True
    partial = f"{executable}.{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(executable), exist_ok=True)
        with open(partial, "w") as handle:
            handle.write(LAUNCHER.format(zip=_own_zip(), python=sys.executable))
        os.chmod(partial, 0o755)
        os.replace(partial, executable)
    except OSError:
        return False
    return True
