"""A home of the fleet: where its jobs keep their checkpoints and tables (a local folder, or a prefix on the S3 API
server through a fault proxy), its config file, its Dagster instance and daemon, its jobs' continuous runs, the
input that lands all along, and the checkpoint logs kept for the oracle.

Why each piece:
- The config file is the one a user writes: the jobs (built-in ones on files, one on Kafka, a user's own job from
  a module outside StateOps), the remediation policy in `auto` mode with short cooldowns, the deep audit and
  retention schedules on short crons (`[audit] deep_audit_cron`, `[retention] cron`), retention applying on its
  schedule. The watermark delays stay fixed (`growth_action = "alert"`): a delay a runbook changes mid-run is
  checked against the oracle in test_recovery_modes; here the oracle must follow an hour of batches exactly.
- Each job runs as a continuous Dagster run, launched once through the instance's run queue (an operator's
  launch); after a fault the daemon's query_health_sensor restarts it (a stale lease, a failed run), as in
  production.
- Spark and retention delete old offsets and source-log files (Spark keeps 100 batches): a soak outlives that, so
  the home keeps a copy of each job's `offsets/` and `sources/` as they appear (each file is written once), and
  the oracle reads the batches from the copy.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Callable

from stateops.control.fence.lease import Lease, current
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.layout import Layout
from stateops.storage import filesystem

from tests.support import ROOT
from tests.support.faults.processes import terminate_group
from tests.support.faults.proxy import FaultProxy

BIN = os.path.dirname(sys.executable)
STATEOPS, DAGSTER, DAEMON = (os.path.join(BIN, name) for name in ("stateops", "dagster", "dagster-daemon"))
EXAMPLES = os.path.join(ROOT, "examples")
TTL, HEARTBEAT = 30.0, 5.0       # a loaded 2-core machine: a 4 s lease would lapse by load alone
SENSOR_INTERVAL = 20
AUDIT_CRON, RETENTION_CRON = "*/6 * * * *", "*/5 * * * *"
# S3A gives up on a cut-off store after one try (its default retries for minutes).
S3A_FAST_FAIL = {"spark.hadoop.fs.s3a.retry.limit": "1", "spark.hadoop.fs.s3a.attempts.maximum": "1",
                 "spark.hadoop.fs.s3a.connection.timeout": "5000",
                 "spark.hadoop.fs.s3a.connection.establish.timeout": "5000"}
RUN = 'trigger_interval = "10 seconds"\nshuffle_partitions = 2\n'
EVENTS_PER_FILE, FILES_PER_LANDING, ORDERS_PER_LANDING = 60, 2, 12
FIRST = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
BASE = GeneratorConfig(events=EVENTS_PER_FILE * FILES_PER_LANDING, files=FILES_PER_LANDING, users=40,
                       minutes_per_file=10, late_share=0.04, late_minutes=90, duplicate_share=0.05,
                       malformed_share=0.02, future_share=0.01)


@dataclass(frozen=True)
class Job:
    """One job of a home: its name, its inputs' kind (files, kafka) and its config table."""

    name: str
    source: str = "files"
    table: str = ""
    inputs: tuple[str, ...] = ("events",)


def _engagement_table() -> str:
    with open(os.path.join(EXAMPLES, "engagement.toml")) as handle:
        text = handle.read()
    return text[text.index("[jobs.user_engagement]"):]


def local_jobs(bootstrap: str) -> list[Job]:
    """The local home: sessions and custom state on files, the user's job, and user_activity on Kafka."""
    kafka = (f'source = "kafka"\nkafka_bootstrap_servers = "{bootstrap}"\n'
             'kafka_options = { maxOffsetsPerTrigger = "150" }\n')
    return [Job("user_sessions"), Job("user_actions"), Job("user_engagement", table=_engagement_table()),
            Job("user_activity", source="kafka", table=f"[jobs.user_activity]\n{kafka}")]


def s3_jobs() -> list[Job]:
    """The home on the S3 API server: the dedup and window job and the join, on files."""
    return [Job("user_activity", table='[jobs.user_activity]\nmax_files_per_trigger = 1\n'),
            Job("order_payments", inputs=("orders", "payments"),
                table='[jobs.order_payments]\nmax_files_per_trigger = 2\n')]


def config_text(jobs: list[Job], archive_root: str | None) -> str:
    """The home's config file."""
    parts = [f'[audit]\ndeep_audit_cron = "{AUDIT_CRON}"\n',
             f'[retention]\ncron = "{RETENTION_CRON}"\napply_on_schedule = true\n',
             '[remediation]\nmode = "auto"\ncooldown_seconds = 60\ndaily_budget = 1000\ngrowth_action = "alert"\n'
             'progress_timeout_seconds = 300\nescalate_interval_seconds = 600\n']
    for job in jobs:
        header, _, rest = (job.table or f"[jobs.{job.name}]\n").partition("\n")  # before any [[...inputs]] table
        archive = f'archive_dir = "{archive_root}/{job.name}"\n' if archive_root else ""
        parts.append(f"{header}\n{RUN}{archive}{rest}")
    return "\n".join(parts)


@dataclass
class Home:
    """One home of the fleet (kind "local" or "s3")."""

    kind: str
    url: str                        # the home: a local folder or s3://bucket/prefix
    work: str                       # a local folder: config, Dagster home, logs, staged input, kept logs
    jobs: list[Job]
    env: dict[str, str]
    proxy: FaultProxy | None = None
    archive_root: str | None = None
    bootstrap: str | None = None
    daemon: subprocess.Popen | None = None
    landed: int = 0
    events: list[str] = field(default_factory=list)   # what happened, for the figures and a failure's message

    @property
    def layout(self) -> Layout:
        return Layout(self.url)

    @property
    def config(self) -> str:
        return os.path.join(self.work, "stateops.toml")

    @property
    def dagster_home(self) -> str:
        return os.path.join(self.work, "dagster_home")

    @property
    def workspace(self) -> str:
        return os.path.join(self.work, "workspace.yaml")

    def note(self, text: str) -> None:
        self.events.append(f"{time.strftime('%H:%M:%S')} {self.kind}: {text}")

    # --- set up --------------------------------------------------------------------------------------------

    def set_up(self) -> None:
        """Config file, Dagster home and workspace; every sensor and the audit and retention schedules on."""
        os.makedirs(self.dagster_home, exist_ok=True)
        with open(self.config, "w") as handle:
            handle.write(config_text(self.jobs, self.archive_root))
        shutil.copy(os.path.join(ROOT, "orchestration", "dagster.yaml"), self.dagster_home)
        with open(self.workspace, "w") as handle:
            handle.write(f"load_from:\n  - python_module:\n      module_name: stateops.dagster.definitions\n"
                         f"      location_name: fleet_{self.kind}\n      working_directory: {ROOT}\n"
                         f"      executable_path: {sys.executable}\n")
        self.env.update({"DAGSTER_HOME": self.dagster_home, "STATEOPS_HOME": self.url, "STATEOPS_CONFIG": self.config,
                         "STATEOPS_SENSOR_INTERVAL_SECONDS": str(SENSOR_INTERVAL),
                         "STATEOPS_LEASE_TIMEOUT_SECONDS": str(TTL), "STATEOPS_LEASE_HEARTBEAT_SECONDS": str(HEARTBEAT),
                         "DAGSTER_GRPC_TIMEOUT_SECONDS": "600", "DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS": "600",
                         "PYTHONPATH": os.pathsep.join((ROOT, EXAMPLES, os.environ.get("PYTHONPATH", ""))),
                         "STATEOPS_SPARK_CONF": json.dumps(S3A_FAST_FAIL if self.kind == "s3" else {})})
        for name in ("STATEOPS_FAULTS", "STATEOPS_CONTROL_HOME", "SPARK_SUBMIT_OPTS"):
            self.env.pop(name, None)
        self.dagster(["sensor", "start", "--start-all"])
        names = [f"{job.name}_deep_audit_hourly" for job in self.jobs] + ["retention_daily"]
        for name in names:
            self.dagster(["schedule", "start", name])

    def dagster(self, args: list[str]) -> None:
        done = subprocess.run([DAGSTER, *args, "-w", self.workspace], env=self.env, cwd=ROOT, capture_output=True,
                              text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"dagster {' '.join(args)} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")

    # --- the daemon ----------------------------------------------------------------------------------------

    def start_daemon(self) -> None:
        with open(os.path.join(self.work, "daemon.log"), "a") as log:
            self.daemon = subprocess.Popen([DAEMON, "run", "-w", self.workspace], env=self.env, cwd=ROOT, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True)
        self.note(f"daemon started (pid {self.daemon.pid})")

    def kill_daemon(self) -> None:
        """kill -9 of the daemon process alone (its code server notices and ends; its runs go on)."""
        if self.daemon is not None and self.daemon.poll() is None:
            os.kill(self.daemon.pid, signal.SIGKILL)
            self.daemon.wait(30)

    def stop_daemon(self) -> None:
        if self.daemon is not None:
            terminate_group(self.daemon, 90)

    # --- the jobs ------------------------------------------------------------------------------------------

    def start_job(self, job: str) -> None:
        """A continuous Dagster run of `job`, submitted to the instance's run queue (the daemon launches it, as it
        launches the sensor's restarts): an operator's launch from the Launchpad, from the command line."""
        from stateops.jobs.definition.environment import get_job

        asset = get_job(job, config_path=self.config, layout=self.layout).output_asset
        config = {"ops": {asset: {"config": {"mode": "continuous"}}}}
        self.dagster(["job", "launch", "-j", f"{job}_job", "--config-json", json.dumps(config)])
        self.note(f"{job}: continuous run submitted")

    def lease(self, job: str) -> Lease | None:
        return current(self.layout, job)

    def run_once(self, job: str, timeout: float = 900) -> tuple[int, str]:
        """`stateops jobs run JOB` (bounded) to the end of the input: (exit code, output)."""
        done = subprocess.run([STATEOPS, "jobs", "run", job, "--json"], env=self.env, cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout)
        return done.returncode, done.stdout + done.stderr

    # --- input ---------------------------------------------------------------------------------------------

    def land(self, produce: Callable[[str, list[str]], None] | None = None) -> None:
        """The next slice of input: FILES_PER_LANDING files of events (and orders and payments where a job reads
        them), later in event time than the last; files go to the landing folder whole (rename or one PUT),
        records of a Kafka job's input to its topic."""
        index = self.landed
        shutil.rmtree(os.path.join(self.work, "stage"), ignore_errors=True)
        stage = Layout(os.path.join(self.work, "stage", str(index)))
        sources = {name for job in self.jobs for name in job.inputs if job.source == "files"}
        kafka = {name for job in self.jobs for name in job.inputs if job.source == "kafka"}
        start = (FIRST + timedelta(minutes=index * BASE.minutes_per_file * BASE.files)).isoformat()
        orders = ORDERS_PER_LANDING if {"orders", "payments"} & sources else 0
        generated = generate(stage, replace(BASE, start=start, orders=orders, first_order=index * ORDERS_PER_LANDING,
                                            seed=1000 + index))
        if kafka and produce is not None:  # first: a broker down raises before any file lands, the slice is retried
            records = generate(Layout(os.path.join(self.work, "stage", "kafka")), replace(BASE, start=start,
                                                                                         seed=5000 + index))
            for name in kafka:
                produce(name, sorted(records.files.get(name, [])))
        for name in sources:
            target = self.layout.landing(name)
            fs, path = filesystem(target)
            fs.makedirs(path, exist_ok=True)
            for staged in sorted(generated.files.get(name, [])):
                final = f"{path}/{index:05d}-{os.path.basename(staged)}"
                if self.kind == "local":
                    os.replace(staged, final)
                else:
                    fs.put(staged, final)
        shutil.rmtree(os.path.join(self.work, "stage"), ignore_errors=True)
        self.landed += 1

    # --- the logs the oracle reads -------------------------------------------------------------------------

    def kept_logs(self, job: str) -> str:
        """The local folder holding every `offsets/` and `sources/` file `job`'s checkpoint has had."""
        return os.path.join(self.work, "kept", job)

    def keep_logs(self) -> None:
        """Copy the checkpoint log files not kept yet (each is written once, so a copy never goes stale)."""
        for job in self.jobs:
            checkpoint = self.layout.checkpoint(job.name)
            fs, root = filesystem(checkpoint)
            for folder in ("offsets", "sources"):
                try:
                    fs.invalidate_cache(f"{root}/{folder}")  # s3fs keeps a listing, even of a folder not there yet
                    found = fs.find(f"{root}/{folder}")
                except Exception:  # noqa: BLE001 - no checkpoint yet, or the store busy: the next round copies
                    continue
                for path in found:
                    name = os.path.basename(path.rstrip("/"))
                    if not (name.split(".")[0].isdigit() and path.rstrip("/") != f"{root}/{folder}"):
                        continue  # a temp file, a folder marker (S3A writes `offsets/`)
                    local = os.path.join(self.kept_logs(job.name), os.path.relpath(path, root))
                    if not os.path.exists(local):
                        os.makedirs(os.path.dirname(local), exist_ok=True)
                        try:
                            fs.get(path, local + ".part")
                        except Exception:  # noqa: BLE001 - purged meanwhile (kept earlier), or the store busy
                            continue
                        if os.path.exists(local + ".part"):
                            os.replace(local + ".part", local)
