"""One fence trial: two StateOps processes for one job, a fault on the first, the invariants after (issue 43).

The job is `user_activity` in continuous mode, one landing file per micro-batch, a 4 s lease (heartbeat 1 s). A run:

1. process A starts and commits a few batches;
2. the fault (a scenario of scenarios.py: a nemesis with `inject()` and `end()`) hits A at an exact moment: frozen
   whole or its Python alone, a commit held at its proxy and then frozen, cut off from the store, slowed, a process B
   with a skewed lease clock, or killed;
3. more files land, and B (bounded) is started again and again until it takes the lease over (each refused start
   exits 2 at once) and processes everything;
4. the fault ends; A must stop by itself: exit 1, "lost its lease";
5. the last files land and a run C processes them;
6. the invariants (invariants.py) are checked on the home: the Delta log, every commit point written once (S3:
   one object version, and from one process's proxy; local disk: created once), the table against the batch
   recomputation, A's end and its writes after it learned, the takeover's delay.

With the fence off (stateops.faults `fence.off`: a live lease taken anyway, never found lost, the stock commit
writers) the same run must report violations: the checks can fail.

Processes run the CLI (`.venv/bin/stateops`), each through its own proxy on S3 (tests/support/faults/proxy.py),
C1-only JVMs (tests/support/jvm_starts.py). Every schedule is printed, with the proxy logs and the processes'
output, when a trial fails.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator

from stateops.control.fence.lease import current
from stateops.control.store import LOCK_TTL_SECONDS
from stateops.faults import ENV
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.layout import Layout
from stateops.storage import filesystem

from tests.support.faults import processes
from tests.support.faults.history import COMMIT_POINTS
from tests.support.faults.local_history import CreationWatcher
from tests.support.faults.proxy import FaultProxy, render_logs
from tests.support.faults.scenarios import Scenario, Target, scenarios

JOB = "user_activity"
STATEOPS = os.path.join(os.path.dirname(sys.executable), "stateops")
TTL, HEARTBEAT = 4.0, 1.0
FILES_FIRST, FILES_DURING, FILES_LAST = 3, 2, 2
EVENTS_PER_FILE = 150
# A takeover must come within the lease timeout plus this: the control lock's TTL (a holder frozen inside a
# critical section keeps it that long at most) and the taker's own start (its Python, its JVM, the state check).
TAKEOVER_BOUND = LOCK_TTL_SECONDS + 60.0
# How long A may take to stop by itself once its fault ended (it learns at its next heartbeat or fence check).
STOP_BOUND = 90.0
CONFIG_FILE = "stateops.toml"
CONFIG = ('[jobs.user_activity]\ntrigger_interval = "1 second"\nshuffle_partitions = 2\nmax_files_per_trigger = 1\n'
          'watermark_delay = "10 minutes"\n')
# S3A gives up on a cut-off store after one try (its default retries for minutes: the harness's partition would
# then test S3A's patience, not the fence).
S3A_FAST_FAIL = {"spark.hadoop.fs.s3a.retry.limit": "1", "spark.hadoop.fs.s3a.attempts.maximum": "1",
                 "spark.hadoop.fs.s3a.connection.timeout": "5000", "spark.hadoop.fs.s3a.connection.establish.timeout":
                 "5000"}

COMMIT_POINT_PATHS = "|".join(f"(?:{pattern.pattern})" for pattern in COMMIT_POINTS.values())
SCENARIOS: dict[str, Scenario] = scenarios(TTL)
# Scenarios the negative control targets: where the fence is what keeps the invariants (a slow store that never
# lets a lease lapse, and a crash, hold without it).
FENCED = tuple(name for name, scenario in SCENARIOS.items() if scenario.fenced)


@dataclass
class Store:
    """Where the trial's home lives: a local folder, or a prefix of a versioned bucket on the S3 API server."""

    kind: str                      # local | s3
    home: str
    work: str                      # a local folder for the staged input, outputs and mirrors
    s3: Any = None                 # boto3 client with .bucket (versioned), on S3
    aws: dict[str, str] = field(default_factory=dict)

    @property
    def layout(self) -> Layout:
        return Layout(self.home)

    def land(self, files: list[str]) -> None:
        """Move staged input files into the landing folder (each appears whole: a rename, or one PUT)."""
        target = self.layout.landing("events")
        fs, path = filesystem(target)
        fs.makedirs(path, exist_ok=True)
        for staged in files:
            if self.kind == "local":
                os.replace(staged, os.path.join(target, os.path.basename(staged)))
            else:
                fs.put(staged, f"{path}/{os.path.basename(staged)}")
                os.remove(staged)

    def committed(self) -> int:
        """The newest batch in the job's commit log (-1 before the first)."""
        fs, path = filesystem(self.layout.checkpoint(JOB) + "/commits")
        fs.invalidate_cache(path)
        try:
            names = [os.path.basename(p.rstrip("/")) for p in fs.ls(path, detail=False)]
        except FileNotFoundError:
            return -1
        batches = [int(n) for n in names if n.isdigit()]
        return max(batches) if batches else -1


@dataclass
class Party:
    """One StateOps process of the trial (A, B, C): its proxy on S3, its environment, its process."""

    label: str
    env: dict[str, str]
    proxy: FaultProxy | None = None
    process: processes.StartedProcess | None = None
    outputs: list[str] = field(default_factory=list)


@dataclass
class Trial:
    """What happened: the times the invariants need, and everything a failure message prints."""

    scenario: str
    store: str
    writer: str
    fence: bool
    seed: int | None = None
    fault_at: float | None = None           # wall time the fault began
    fault_ended_at: float | None = None
    takeover_at: float | None = None        # wall time another lease than A's was first seen
    lease_history: list[tuple[float, str | None, str | None]] = field(default_factory=list)  # (wall, lease_id, run)
    a_exit: int | None = None
    a_output: str = ""
    a_found_at: float | None = None          # wall time A found it lost its lease
    a_learned_at: float | None = None        # wall time A had stopped writing after that, and said so
    b_attempts: int = 0
    b_exit: int | None = None               # B's last run (a continuous taker: after it was asked to stop)
    taker_after_thaw: str | None = None     # a continuous taker once A stopped: "running and writing", or what not
    c_exit: int | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    proxy_log: str = ""
    proxy_entries: dict[str, list] = field(default_factory=dict)  # label -> the proxy's log (S3)
    creations: dict[str, int] = field(default_factory=dict)  # commit point -> times created (local disk)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        seed = f", seed {self.seed}" if self.seed is not None else ""
        return (f"trial {self.scenario} on {self.store} with {self.writer}, fence {'on' if self.fence else 'off'}"
                f"{seed}: fault at {self.fault_at}, ended {self.fault_ended_at}, takeover at {self.takeover_at}, "
                f"A exit {self.a_exit} (learned at {self.a_learned_at}), B attempts {self.b_attempts}, C exit "
                f"{self.c_exit}; leases {self.lease_history}; notes {self.notes}")


def stage_input(work: str) -> list[str]:
    """Every input file of the trial, generated once into a staging folder (landed a few at a time)."""
    staging = Layout(os.path.join(work, "staging"))
    files = FILES_FIRST + FILES_DURING + FILES_LAST
    generated = generate(staging, GeneratorConfig(events=EVENTS_PER_FILE * files, files=files, users=40,
                                                  minutes_per_file=20, late_share=0.03, duplicate_share=0.05,
                                                  malformed_share=0.02, seed=43))
    return sorted(generated.files["events"])


def base_env(store: Store, writer: str, fence: bool, config: str) -> dict[str, str]:
    env = {**os.environ, "STATEOPS_HOME": store.home, "STATEOPS_CONFIG": config, "STATEOPS_DELTA_WRITER": writer,
           "STATEOPS_LEASE_HEARTBEAT_SECONDS": str(HEARTBEAT), "STATEOPS_LEASE_TIMEOUT_SECONDS": str(TTL),
           "STATEOPS_SPARK_CONF": json.dumps(S3A_FAST_FAIL if store.kind == "s3" else {})}
    env.pop("STATEOPS_CONTROL_HOME", None)
    env.pop(ENV, None)
    if not fence:
        env[ENV] = "fence.off"
    return env


@contextlib.contextmanager
def _watch_leases(store: Store, trial: Trial) -> Iterator[None]:
    """Record every change of the job's lease record (polled), with the wall time it was seen."""
    done = threading.Event()

    def poll() -> None:
        last = object()
        while not done.wait(0.2):
            try:
                lease = current(store.layout, JOB)
            except Exception:  # noqa: BLE001 - a half-written record or a busy store: read it again
                continue
            seen = (lease.lease_id, lease.run_id) if lease else (None, None)
            if seen != last:
                trial.lease_history.append((time.time(), *seen))
                last = seen

    thread = threading.Thread(target=poll, name="lease-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _party(label: str, env: dict[str, str], store: Store, stack: contextlib.ExitStack) -> Party:
    if store.kind != "s3":
        return Party(label, env)
    proxy = stack.enter_context(FaultProxy(store.aws["AWS_ENDPOINT_URL"], label))
    return Party(label, proxy.env(env), proxy)


def _start(party: Party, args: list[str], work: str, stack: contextlib.ExitStack, env: dict | None = None) -> None:
    output = os.path.join(work, f"{party.label}-{len(party.outputs)}.out")
    party.outputs.append(output)
    party.process = stack.enter_context(processes.running([STATEOPS, *args], output, env or party.env))


def _wait(condition, timeout: float, what: str, party: Party | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if party is not None and party.process is not None and party.process.popen.poll() is not None:
            raise AssertionError(f"{party.label} ended ({party.process.popen.returncode}) while waiting for {what}:"
                                 f"\n{party.process.output()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _loss_times(output: str) -> tuple[float | None, float | None]:
    """When A found it lost its lease, and when it had stopped writing (its line carries the wall times of both)."""
    for line in output.splitlines():
        if " lost its lease at " in line and " writes stopped at " in line:
            found = line.split(" lost its lease at ", 1)[1].split(" ", 1)[0]
            stopped = line.split(" writes stopped at ", 1)[1].split(",", 1)[0].strip()
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(found).timestamp(), datetime.fromisoformat(stopped).timestamp()
    return None, None


def _taken_or_ended(store: Store, b: Party, a_lease: str | None, deadline: float) -> tuple[int | None, str]:
    """A continuous B: (None, "") once the lease is another's than A's while B runs (B took it), or B's exit."""
    while True:
        code = b.process.popen.poll()
        if code is not None:
            return processes.wait_exit(b.process, 10)
        lease = current(store.layout, JOB)
        if lease is not None and lease.lease_id != a_lease:
            return None, ""
        if time.monotonic() > deadline:
            return None, "B neither took the lease nor ended"
        time.sleep(0.2)


def _writes_on(store: Store, b: Party, files: list[str]) -> str:
    """Land `files` for a continuous B (one batch each) and say whether it committed them all while running."""
    before = store.committed()
    store.land(files)
    deadline = time.monotonic() + 180
    while store.committed() < before + len(files):
        if b.process.popen.poll() is not None:
            return f"B ended ({b.process.popen.returncode}) before it committed the files landed after the thaw"
        if time.monotonic() > deadline:
            return f"B committed {store.committed() - before} of {len(files)} files landed after the thaw in 180 s"
        time.sleep(0.2)
    return "running and writing"


def _takeover(trial: Trial, a_lease: str | None) -> float | None:
    return next((at for at, lease, _run in trial.lease_history if lease is not None and lease != a_lease), None)


def run_trial(store: Store, name: str, writer: str, *, fence: bool = True, seed: int | None = None,
              at_batch: int = 1, start_delay: float = 0.0) -> Trial:
    """One trial of scenario `name` (SCENARIOS) on `store` with Delta `writer`, the fault at batch `at_batch` (the
    harness's faults `start_delay` seconds after that batch committed); see the module doc."""
    scenario = scenarios(TTL)[name]  # its own object: a scenario keeps what it injected until it ends it
    trial = Trial(name, store.kind, writer, fence, seed)
    config = os.path.join(store.work, CONFIG_FILE)
    with open(config, "w") as handle:
        handle.write(CONFIG)
    staged = stage_input(store.work)
    first, during, last = staged[:FILES_FIRST], staged[FILES_FIRST:FILES_FIRST + FILES_DURING], \
        staged[FILES_FIRST + FILES_DURING:]
    env = base_env(store, writer, fence, config)
    with contextlib.ExitStack() as stack:
        watcher = None
        if store.kind == "local":
            os.makedirs(store.home, exist_ok=True)
            watcher = stack.enter_context(CreationWatcher(store.home))
        stack.enter_context(_watch_leases(store, trial))
        a = _party("A", env, store, stack)
        b = _party("B", scenario.b_env(env, TTL), store, stack)
        c = _party("C", env, store, stack)
        store.land(first)
        _start(a, ["jobs", "run", JOB, "--mode", "continuous", "--max-seconds", "400"], store.work, stack,
               scenario.a_env(a.env, JOB, at_batch))
        a_lease = None

        def a_running() -> bool:
            nonlocal a_lease
            lease = current(store.layout, JOB)
            a_lease = lease.lease_id if lease else a_lease
            return a_lease is not None and (not scenario.needs_batch or store.committed() >= at_batch - 1)

        _wait(a_running, 300, f"A to take its lease and commit batch {at_batch - 1}", a)
        target = Target(a.process, a.proxy, store.committed, lambda condition, timeout, what: _wait(
            condition, timeout, what, a))
        scenario.inject(target, at_batch, start_delay)
        trial.fault_at = time.time()
        store.land(during)

        # B: again and again until it takes the lease over (a refused start exits 2 at once), then to the end, or
        # (a continuous taker) on and on.
        deadline = time.monotonic() + TTL + TAKEOVER_BOUND + 120
        continuous = scenario.taker == "continuous"
        b_args = ["jobs", "run", JOB] + (["--mode", "continuous", "--max-seconds", "600"] if continuous else [])
        while True:
            trial.b_attempts += 1
            _start(b, b_args, store.work, stack)
            if continuous:
                code, output = _taken_or_ended(store, b, a_lease, deadline)
            else:
                code, output = processes.wait_exit(b.process, 600)
            if code in (0, None):
                break
            if code == 2 and "is already running" in output and time.monotonic() < deadline:
                if not scenario.takeover and trial.b_attempts >= 10:  # A keeps its lease (a slow store): so be it
                    trial.notes.append(f"B refused while A kept its lease ({name}): no takeover")
                    break
                time.sleep(1.0)
                continue
            trial.notes.append(f"B attempt {trial.b_attempts} ended {code}")
            break
        if continuous and code is None and not output:  # B took it: the lease watcher's record of when (it polls)
            _wait(lambda: _takeover(trial, a_lease) is not None, 10, "the lease watcher to see B's takeover")
        trial.takeover_at = _takeover(trial, a_lease)

        # The fault ends; A must stop by itself (unless it kept its lease: then it is asked to stop).
        scenario.end(target)
        trial.fault_ended_at = time.time()
        if trial.takeover_at is None and not scenario.kills:
            _start(c, ["jobs", "stop", JOB, "--wait", "120"], store.work, stack)
            processes.wait_exit(c.process, 180)
        if scenario.kills:
            trial.a_exit, trial.a_output = processes.wait_exit(a.process, 30)
        else:
            try:
                trial.a_exit, trial.a_output = processes.wait_exit(a.process, STOP_BOUND)
            except TimeoutError as err:
                trial.notes.append(f"A did not stop within {STOP_BOUND:g} s: {str(err)[-300:]}")
                processes.crash(a.process)
                trial.a_exit, trial.a_output = processes.wait_exit(a.process, 30)
        trial.a_found_at, trial.a_learned_at = _loss_times(trial.a_output)
        if continuous and b.process.popen.poll() is None:
            trial.taker_after_thaw = _writes_on(store, b, last)  # the last files land for the taker
            _start(c, ["jobs", "stop", JOB, "--wait", "120"], store.work, stack)
            processes.wait_exit(c.process, 180)
        if continuous:
            trial.b_exit, _ = processes.wait_exit(b.process, 180)
        else:
            trial.b_exit = code

        # C finishes what is left, after the last files landed.
        if not continuous:
            store.land(last)
        _start(c, ["jobs", "run", JOB], store.work, stack)
        trial.c_exit, _ = processes.wait_exit(c.process, 600)
        for party in (a, b, c):
            for path in party.outputs:
                with open(path, errors="replace") as handle:
                    trial.outputs[os.path.basename(path)] = handle.read()[-6000:]
        if watcher is not None:
            watcher.flush()
            trial.creations = watcher.creations(COMMIT_POINT_PATHS)
        if store.kind == "s3":
            trial.proxy_log = render_logs(*(p.proxy for p in (a, b, c)))
            trial.proxy_entries = {p.label: p.proxy.log() for p in (a, b, c)}
    return trial


def fresh_local(tmp_path) -> Store:
    work = str(tmp_path / "work")
    os.makedirs(work)
    return Store("local", str(tmp_path / "home"), work)


def fresh_s3(tmp_path, s3_client, env: dict[str, str], name: str) -> Store:
    work = str(tmp_path / "work")
    os.makedirs(work)
    return Store("s3", f"s3://{s3_client.bucket}/{name}", work, s3_client, dict(env))
