"""The fleet soak, whole: servers, homes, jobs, daemons, input, nemesis, the stop, the last runs, the invariants and
the figures.

    .venv/bin/python -m tests.support.fleet.soak --minutes 60 [--seed 7] [--work DIR]

prints the figures and exits 1 on any violation; tests/e2e/test_fleet_soak.py runs it for STATEOPS_SOAK_MINUTES
(long tier). Everything runs on this machine: the S3 API server (moto) behind a fault proxy, a Kafka broker on a
data folder that survives its restarts, the two homes' daemons, their runs.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator

from tests.support import ROOT
from tests.support.faults.processes import terminate_group
from tests.support.fleet import checks
from tests.support.fleet.homes import EXAMPLES, STATEOPS, Home, local_jobs, s3_jobs
from tests.support.fleet.nemesis import FullDisk, Nemesis
from tests.support.fleet.watch import Watch
from tests.support.servers.ports import free_port

LAND_EVERY = 40.0            # seconds between two slices of input per home
KEEP_EVERY = 15.0            # seconds between two copies of the checkpoints' logs
NEMESIS_EVERY = (90.0, 210.0)  # seconds between two faults, drawn uniformly
STOP_WAIT = 300.0            # a stop request to the lease released
RUNS_WAIT = 900.0            # then every Dagster run in flight (an audit, retention, a runbook) to its end
DISK_BYTES = 256 << 20       # the local home's archive disk
START_GAP = 20.0             # seconds between two jobs' first starts (six JVMs and Python workers at once on 2 cores
                             # outlast Spark's 10 s for a Python worker to connect back)


class Broker:
    """scripts/kafka on fixed ports and a data folder that survives a kill -9 (KAFKA_DATA)."""

    def __init__(self, work: str):
        self.port, self.controller = free_port(), free_port()
        self.data = os.path.join(work, "kafka-data")
        self.log = os.path.join(work, "kafka.log")
        self.process: subprocess.Popen | None = None
        self.bootstrap = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        from stateops.jobs.demo.kafka_input import wait_for_broker

        env = {**os.environ, "KAFKA_PORT": str(self.port), "KAFKA_CONTROLLER_PORT": str(self.controller),
               "KAFKA_DATA": self.data}
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(["bash", os.path.join(ROOT, "scripts", "kafka")], env=env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_broker(self.bootstrap, 180)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None:
            terminate_group(self.process, 60)

    def produce(self, topic: str, paths: list[str]) -> None:
        from stateops.jobs.demo.kafka_input import produce_files

        produce_files(self.bootstrap, topic, paths)


@contextlib.contextmanager
def _archive_disk(root: str) -> Iterator[FullDisk | None]:
    """A tmpfs at `root` for the local home's archives, or None (and a plain folder) where mounting is refused."""
    os.makedirs(root, exist_ok=True)
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", root],
                                                   capture_output=True).returncode == 0
    try:
        yield FullDisk(root) if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", "-l", root], check=False)


@dataclass
class Figures:
    minutes: float
    seed: int
    faults: Counter = field(default_factory=Counter)
    fault_lines: list[str] = field(default_factory=list)
    skipped_faults: dict[str, str] = field(default_factory=dict)
    tables: dict[str, dict] = field(default_factory=dict)
    runbooks: dict[str, Counter] = field(default_factory=dict)
    leases: dict[str, dict] = field(default_factory=dict)
    ops: dict[str, dict] = field(default_factory=dict)
    runs: dict[str, Counter] = field(default_factory=dict)
    memory: list[str] = field(default_factory=list)
    stalls: dict[str, float] = field(default_factory=dict)  # the longest time (s) each job went without a batch
    landed: dict[str, int] = field(default_factory=dict)
    late_holders: int = 0   # runs that took a lease after the end's stop request (launched before it), asked in turn
    harness: list[str] = field(default_factory=list)   # the soak's own retries (a broker restarting, a store cut off)
    violations: list[str] = field(default_factory=list)

    def render(self) -> str:
        def total(key: str) -> int:
            return sum(t.get(key, 0) for t in self.tables.values())

        lost, duplicated = total("lost"), total("duplicated") + total("invented")
        lines = [f"fleet soak: {self.minutes:g} min, seed {self.seed}, "
                 f"{sum(self.faults.values())} faults ({', '.join(f'{k} {v}' for k, v in sorted(self.faults.items()))})",
                 f"rows in {total('rows_in'):,}, rows out {total('rows_out'):,}, lost {lost}, duplicated {duplicated}, "
                 f"dead letters {total('dead_letters')} of {total('bad_lines')} bad lines"]
        lines += [f"  {name}: {json.dumps(counts)}" for name, counts in sorted(self.tables.items())]
        lines += [f"  leases {home}: {json.dumps(found)}" for home, found in sorted(self.leases.items())]
        lines += [f"  runbooks {name}: {dict(found)}" for name, found in sorted(self.runbooks.items()) if found]
        lines += [f"  ops tables {home}: {json.dumps(found)}" for home, found in sorted(self.ops.items())]
        lines += [f"  dagster runs {home}: {dict(found)}" for home, found in sorted(self.runs.items())]
        lines += [f"  longest without a batch (s): {json.dumps(self.stalls)}"]
        lines += [f"  memory: {line}" for line in self.memory]
        lines += [f"  fault: {line}" for line in self.fault_lines]
        lines += [f"  not tried: {kind} ({why})" for kind, why in self.skipped_faults.items()]
        lines += [f"  landed: {json.dumps(self.landed)}; harness retries: {len(self.harness)}; holders that took a "
                  f"lease after the stop request: {self.late_holders}"]
        lines.append(f"violations: {len(self.violations)}")
        lines += [f"  VIOLATION {v}" for v in self.violations]
        return "\n".join(lines)


def _every(stop: threading.Event, seconds: float, step, errors: list[str], what: str) -> threading.Thread:
    def loop() -> None:
        while not stop.wait(seconds):
            try:
                step()
            except Exception as err:  # noqa: BLE001 - a broker restarting: the next round lands the slice again
                errors.append(f"{time.strftime('%H:%M:%S')} {what}: {str(err).splitlines()[0] if str(err) else err!r}")

    thread = threading.Thread(target=loop, daemon=True, name=what)
    thread.start()
    return thread


def _stop_jobs(home: Home, figures: Figures) -> None:
    """The end of the soak, as an operator stops a fleet: the daemon killed (nothing new is launched; its runs go on),
    queued runs cancelled, every job asked to stop and its lease gone, every run in flight (audits, retention,
    runbooks) ended by itself; then what is left of the daemon's process group (its code server). A run the daemon
    launched before it was killed may take the lease only after the stop request (its JVM starting under load), when
    `jobs stop` found nothing to stop: it is asked in turn, and has STOP_WAIT from then."""
    home.kill_daemon()
    checks.cancel_unlaunched(home)
    asked = {job.name: _ask_to_stop(home, job.name) for job in home.jobs}  # job -> (holder asked, when)
    while True:
        held = {}
        for job in home.jobs:
            lease = home.lease(job.name)
            if lease is None or lease.stale_reason(_control()):
                continue
            if lease.run_id != asked[job.name][0]:
                asked[job.name] = _ask_to_stop(home, job.name)
                figures.late_holders += 1
            held[job.name] = asked[job.name][1]
        overdue = sorted(job for job, since in held.items() if time.monotonic() - since > STOP_WAIT)
        if not held or overdue:
            break
        time.sleep(2)
    if overdue:
        figures.violations.append(f"{home.kind}: jobs {overdue} still held their leases {STOP_WAIT:.0f} s after a "
                                  "stop request")
    deadline = time.monotonic()
    active = checks.active_runs(home)
    while active and time.monotonic() < deadline + RUNS_WAIT:
        time.sleep(5)
        active = checks.active_runs(home)
    figures.violations += [f"{home.kind}: run {run} still in flight {RUNS_WAIT:.0f} s after the stop" for run in active]
    home.stop_daemon()


def _ask_to_stop(home: Home, job: str) -> tuple[str | None, float]:
    """`stateops jobs stop JOB`: (the run id of the holder it asked, or None, and when)."""
    lease = home.lease(job)
    subprocess.run([STATEOPS, "jobs", "stop", job,
                    "--reason", "fleet soak ends"], env=home.env, cwd=ROOT, capture_output=True, timeout=300)
    return (lease.run_id if lease is not None else None), time.monotonic()


def _control():
    from stateops.control import ControlSettings

    return ControlSettings.from_env()


def run(work: str, minutes: float, seed: int, log=print) -> Figures:
    from tests.support.servers.moto import moto_s3
    from tests.support.faults.proxy import FaultProxy

    if EXAMPLES not in sys.path:
        sys.path.append(EXAMPLES)  # the user's job's module, as its runs import it (the oracle reads its config)
    rng = random.Random(seed)
    figures = Figures(minutes, seed)
    errors: list[str] = []
    with contextlib.ExitStack() as stack:
        aws = stack.enter_context(moto_s3())
        os.environ.update(aws)  # the harness reads and lands on the server directly; the fleet goes through the proxy
        import boto3

        boto3.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL"]).create_bucket(Bucket="fleet")
        proxy = stack.enter_context(FaultProxy(aws["AWS_ENDPOINT_URL"], "fleet-s3"))
        broker = Broker(work)
        broker.start()
        stack.callback(broker.stop)
        disk = stack.enter_context(_archive_disk(os.path.join(work, "archive-disk")))
        if disk is None:
            figures.skipped_faults["full_disk"] = "mounting a tmpfs needs root"
        from stateops.jobs.demo.kafka_input import create_topics

        create_topics(broker.bootstrap, ["events"])
        local = Home("local", os.path.join(work, "local", "home"), os.path.join(work, "local"),
                     local_jobs(broker.bootstrap), dict(os.environ), archive_root=os.path.join(work, "archive-disk"),
                     bootstrap=broker.bootstrap)
        remote = Home("s3", "s3://fleet/home", os.path.join(work, "s3"), s3_jobs(), proxy.env(dict(os.environ)),
                      proxy=proxy)
        homes = [local, remote]
        for home in homes:
            home.set_up()
            home.land(broker.produce)
            home.start_daemon()
            stack.callback(home.stop_daemon)
            for job in home.jobs:
                home.start_job(job.name)
                time.sleep(START_GAP)
        fleet = [datetime.now(timezone.utc)]  # its start, then its stop: the stalls are measured between them
        log(f"fleet up: {sum(len(h.jobs) for h in homes)} jobs, 2 daemons, broker {broker.bootstrap}, proxy {proxy.url}")
        watch = Watch(homes).start()
        stop, stop_keeping = threading.Event(), threading.Event()
        # The logs are kept until the last runs end: Spark purges old offsets while a run catches up on a backlog.
        keeping = _every(stop_keeping, KEEP_EVERY, lambda: [h.keep_logs() for h in homes], errors, "keep logs")
        threads = [_every(stop, LAND_EVERY, lambda: [h.land(broker.produce) for h in homes], errors, "land")]
        nemesis = Nemesis(homes, watch, rng, disk=disk, restart_broker=broker.start, kill_broker=broker.kill)
        end = time.monotonic() + minutes * 60
        while time.monotonic() < end:
            pause = rng.uniform(*NEMESIS_EVERY)
            if time.monotonic() + pause > end - 60:
                break
            time.sleep(pause)
            fault = nemesis.act()
            if fault is not None:
                log(f"nemesis: {fault.line()}")
        time.sleep(max(0.0, end - time.monotonic()))
        stop.set()
        for thread in threads:
            thread.join(300)
        fleet.append(datetime.now(timezone.utc))
        log("stopping the fleet")
        for home in homes:
            _stop_jobs(home, figures)
        watch.stop()
        for home in homes:
            for job in home.jobs:
                code, output = home.run_once(job.name)
                if code != 0:
                    figures.violations.append(f"{home.kind} {job.name}: the last run ended {code}: {output[-1500:]}")
        stop_keeping.set()
        keeping.join(300)
        for home in homes:
            home.keep_logs()
        _judge(figures, homes, watch, nemesis, broker, work, fleet)
        figures.landed = {home.kind: home.landed for home in homes}
        figures.harness = errors + [f"{watch.errors} lease or memory reads retried"]
        for home in homes:
            with open(os.path.join(home.work, "events.log"), "w") as handle:
                handle.write("\n".join(home.events + errors))
    return figures


def _judge(figures: Figures, homes: list[Home], watch: Watch, nemesis: Nemesis, broker: Broker, work: str,
           fleet: list[datetime]) -> None:
    from stateops.jobs.definition.environment import get_job
    from stateops.layout import Layout
    from tests.support.servers.kafka import records
    from tests.support.servers.moto import mirror

    figures.faults = Counter(f.kind for f in nemesis.faults)
    figures.fault_lines = [f.line() for f in nemesis.faults]
    kafka_records = {"events": records(broker.bootstrap, "events")}
    for home in homes:
        landing = home.layout
        if home.kind == "s3":
            landing = Layout(os.path.join(work, "mirror"))
            for source in {name for job in home.jobs for name in job.inputs}:
                mirror(home.layout.landing(source), landing.landing(source))
        for job in home.jobs:
            delay = get_job(job.name, config_path=home.config, layout=home.layout).watermark_seconds * 1000
            try:
                counts, problems = checks.table(home, job, landing, delay, kafka_records)
            except Exception as err:  # noqa: BLE001 - a table the oracle cannot read is a violation, with its cause
                counts, problems = {}, [f"{home.kind} {job.name}: the oracle failed: {err!r}"]
            figures.tables[f"{home.kind} {job.name}"] = counts
            figures.violations += problems
            outcomes, problems = checks.runbooks(home, job.name)
            figures.runbooks[f"{home.kind} {job.name}"] = outcomes
            figures.violations += problems
            figures.stalls[f"{home.kind} {job.name}"], problems = checks.stalls(home, job.name, *fleet)
            figures.violations += problems
        figures.leases[home.kind], problems = checks.leases(home, watch, nemesis.faults)
        figures.violations += problems
        figures.ops[home.kind], problems = checks.ops_tables(home)
        figures.violations += problems
        figures.runs[home.kind], problems = checks.dagster_runs(home)
        figures.violations += problems
    figures.memory, problems = checks.memory(watch)
    figures.violations += problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--work", default=None, help="a folder for everything (default: a new temporary one)")
    args = parser.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="stateops-fleet-")
    os.makedirs(work, exist_ok=True)
    print(f"work folder: {work}", flush=True)
    figures = run(work, args.minutes, args.seed, log=lambda line: print(line, flush=True))
    print(figures.render(), flush=True)
    return 1 if figures.violations else 0


if __name__ == "__main__":
    sys.exit(main())
