"""A real Spark standalone cluster on loopback, started from the pip package: one master, N workers.

The cluster tests (tests/cluster/) and the driver-sink benchmark use it; `python -m tests.support.servers.spark_cluster`
starts one by hand and prints its master URL until Ctrl-C. Every daemon runs in its own process group and
is killed with it on exit, failure included; logs and the workers' directories stay under `root`.

Workers inherit this process's PYTHONPATH (executors' Python workers import `jobs`/`stateops` from it) and
run `sys.executable` as their Python, as the driver does.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Iterator

from tests.support.servers.ports import LOOPBACK, free_port

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return _find_spark_home()


@dataclass
class SparkCluster:
    master_url: str
    webui_url: str
    root: str
    workers: int
    cores: int
    memory: str
    processes: list[subprocess.Popen] = field(default_factory=list)

    def state(self) -> dict:
        """The master's own view (`/json`): workers, running and completed applications."""
        with urllib.request.urlopen(f"{self.webui_url}/json", timeout=10) as response:
            return json.load(response)

    def alive_workers(self) -> list[dict]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a driver (e.g. `stateops jobs run`) that runs its queries on this cluster."""
        pythonpath = os.environ.get("PYTHONPATH", "")
        conf = {"spark.executor.memory": self.memory, "spark.executor.cores": str(self.cores),
                "spark.driver.host": LOOPBACK, "spark.driver.bindAddress": LOOPBACK,
                "spark.executorEnv.PYTHONPATH": pythonpath,
                "spark.executorEnv.PYSPARK_PYTHON": sys.executable}
        return {**os.environ, "STATEOPS_SPARK_MASTER": self.master_url, "STATEOPS_SPARK_CONF": json.dumps(conf),
                "SPARK_LOCAL_IP": LOOPBACK, "PYSPARK_PYTHON": sys.executable, **extra}

    def executor_dirs(self) -> list[str]:
        """`<worker dir>/<app id>/<executor id>` of every executor any worker launched."""
        found = []
        for n in range(self.workers):
            base = os.path.join(self.root, f"worker-{n}", "work")
            for app in sorted(os.listdir(base)) if os.path.isdir(base) else []:
                found += [os.path.join(base, app, ex) for ex in sorted(os.listdir(os.path.join(base, app)))]
        return found

    def stop(self) -> None:
        for proc in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)


def _daemon(root: str, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    log = open(os.path.join(root, f"{name}.log"), "ab")
    try:
        return subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def spark_cluster(root: str, workers: int = 2, cores: int = 1, memory: str = "1g",
                  timeout: float = 600) -> Iterator[SparkCluster]:
    """Start a master and `workers` workers on loopback, wait until all registered, yield, kill them."""
    os.makedirs(root, exist_ok=True)
    conf_dir = os.path.join(root, "conf")  # empty: no site spark-defaults or log4j settings leak in
    os.makedirs(conf_dir, exist_ok=True)
    env = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": LOOPBACK, "SPARK_CONF_DIR": conf_dir,
           "SPARK_LOG_DIR": root, "PYSPARK_PYTHON": sys.executable,
           "SPARK_DAEMON_MEMORY": "512m"}
    port, webui = free_port(), free_port()
    cluster = SparkCluster(f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{webui}", root, workers, cores, memory)
    try:
        cluster.processes.append(_daemon(root, "master", [MASTER, "--host", LOOPBACK, "--port", str(port),
                                                          "--webui-port", str(webui)], env))
        for n in range(workers):
            work = os.path.join(root, f"worker-{n}", "work")
            os.makedirs(work, exist_ok=True)
            cluster.processes.append(_daemon(root, f"worker-{n}", [
                WORKER, "--host", LOOPBACK, "--webui-port", str(free_port()), "--cores", str(cores),
                "--memory", memory, "--work-dir", work, cluster.master_url], {**env, "SPARK_WORKER_DIR": work}))
        deadline = time.monotonic() + timeout
        while True:
            dead = [p for p in cluster.processes if p.poll() is not None]
            if dead:
                name = "master" if dead[0] is cluster.processes[0] else f"worker-{cluster.processes.index(dead[0]) - 1}"
                raise RuntimeError(f"Spark {name} exited with {dead[0].returncode}:\n"
                                   + _tail(os.path.join(root, f"{name}.log")))
            with contextlib.suppress(OSError, ValueError):
                if len(cluster.alive_workers()) == workers:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{workers} workers did not register with {cluster.master_url} within "
                                   f"{timeout:.0f} s:\n" + _tail(os.path.join(root, "master.log")))
            time.sleep(0.5)
        yield cluster
    finally:
        cluster.stop()


def main() -> None:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="Start a local Spark standalone cluster until Ctrl-C.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--memory", default="1g")
    parser.add_argument("--root", default=None, help="logs and worker dirs (default: a new temp dir)")
    args = parser.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="stateops-cluster-")
    with spark_cluster(root, args.workers, args.cores, args.memory) as cluster:
        print(f"STATEOPS_SPARK_MASTER={cluster.master_url}  (UI {cluster.webui_url}, logs {root})", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()
