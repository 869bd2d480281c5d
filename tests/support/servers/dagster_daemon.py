"""`dagster-daemon run` for the sensor tests: a StateOps home, its config file, a Dagster home with the shipped
instance config and a workspace of StateOps' own code location, and the daemon in a process group of its own."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from stateops.jobs.definition.catalog import Catalog
from stateops.jobs.definition.environment import get_job
from stateops.jobs.definition.settings import effective_spec
from stateops.jobs.definition.targets import resolve_audit
from stateops.audit import deep_audit, record
from stateops.layout import Layout
from tests.support import ROOT
from tests.support.faults.processes import terminate_group

JOB = "user_activity"
LOCATION = "stateops_sensors_e2e"
BIN = os.path.dirname(sys.executable)
DEADLINE = 900  # seconds: the daemon, a run process and Spark on a loaded machine
CONFIG = f"""
[jobs.{JOB}]
shuffle_partitions = 4
watermark_delay = "2 hours"

[audit.jobs.{JOB}]
skew_min_rows = 50
growth_min_rows = 100
growth_ratio = 1.5

[remediation.jobs.{JOB}]
mode = "{{mode}}"
skew_audits = 1
skew_action = "rebuild"
watermark_factor = 0.1
cooldown_seconds = 0
daily_budget = 5
"""


class Daemon:
    """`dagster-daemon run` in a process group of its own; stop() ends that group (and only it)."""

    def __init__(self, world):
        self.world, self.proc = world, None

    def start(self):
        log = open(os.path.join(self.world.tmp, "daemon.log"), "a")
        self.proc = subprocess.Popen([os.path.join(BIN, "dagster-daemon"), "run", "-w", self.world.workspace],
                                     env=self.world.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()

    def stop(self):
        if self.proc is not None:
            terminate_group(self.proc, 60)


class World:
    """The StateOps home, its config file, the Dagster home, the workspace, the instance the test reads."""

    def __init__(self, tmp):
        self.tmp = str(tmp)
        self.layout = Layout(os.path.join(self.tmp, "home"))
        self.config = os.path.join(self.tmp, "stateops.toml")
        self.dagster_home = os.path.join(self.tmp, "dagster_home")
        os.makedirs(self.dagster_home)
        shutil.copy(os.path.join(ROOT, "orchestration", "dagster.yaml"), self.dagster_home)
        self.workspace = os.path.join(self.tmp, "workspace.yaml")
        with open(self.workspace, "w") as handle:
            handle.write(f"load_from:\n  - python_module:\n      module_name: stateops.dagster.definitions\n"
                         f"      location_name: {LOCATION}\n      working_directory: {ROOT}\n"
                         f"      executable_path: {sys.executable}\n")
        self.env = {**os.environ, "DAGSTER_HOME": self.dagster_home, "STATEOPS_HOME": self.layout.home,
                    "STATEOPS_CONFIG": self.config, "STATEOPS_SENSOR_INTERVAL_SECONDS": "5",
                    # a loaded machine makes the daemon's calls to its code server slow: wait, do not fail
                    "DAGSTER_GRPC_TIMEOUT_SECONDS": "600", "DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS": "600",
                    "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.configure("plan")

    def configure(self, mode: str):
        with open(self.config, "w") as handle:
            handle.write(CONFIG.format(mode=mode))

    def spec(self):
        return effective_spec(get_job(JOB, self.config), self.layout)

    def audit(self, spark):
        target = resolve_audit(JOB, Catalog.load(self.layout, self.config))
        report = deep_audit(spark, target.checkpoint, thresholds=target.thresholds, layout=self.layout, job=JOB,
                            join_bound=target.join_bound)
        return record(self.layout, report), report
