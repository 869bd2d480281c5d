"""The soak's invariants, checked once every job has stopped and run once more, each a list of violations (empty:
it held), and the counts the figures print.

    tables        each table equals the oracle's batch recomputation over the input its checkpoint's logs (the
                  kept copy) say each batch read: nothing lost, duplicated or invented; every bad line is a dead
                  letter
    runbooks      every runbook that took a job's maintenance lock released it, completed or rolled back; no two
                  runbooks held one job at once, and no retention item acted on a job while a runbook held it
    leases        every takeover took a stale lease (the record names why); at the end no lease, maintenance lock
                  or retention lock is held; each takeover after a kill or a freeze came within TAKEOVER_BOUND;
                  every thawed holder stopped by itself
    restarts      every job's last run (bounded, after the stop) ended 0: retention left every file a restart needs
    ops tables    the progress and actions tables read, and the retention runs compacted them
    memory        the daemons' and the long-lived drivers' resident memory flat after warm-up
    stalls        no job went STALL_BOUND without a batch of its stateful query while the fleet ran (input lands
                  every 40 s): a job whose every run fails or whose restarts never come is stuck, however exact its
                  table is once the load is gone
    runs          no Dagster run is left queued, starting or started
"""
from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from stateops import actions, progress
from stateops.control import maintenance
from stateops.delta import open_table
from stateops.layout import Layout

from tests.support import engagement_oracle, kafka_oracle, oracle
from tests.support.delta_rows import table_rows
from tests.support.outcomes import TABLE_COLUMNS
from tests.support.fleet.homes import Home, Job
from tests.support.fleet.nemesis import Fault
from tests.support.fleet.watch import Watch

TAKEOVER_BOUND = 600.0          # a kill or freeze to the new holder's lease: staleness, a sensor tick, a run's start
MEMORY_WARM_UP = 600.0          # seconds of a process's life before its memory counts
DAEMON_GROWTH_MIB, DRIVER_GROWTH_MIB = 150.0, 300.0
COMPACT_MIN_FILES = 10          # retention's default [retention.ops_tables] compact_min_files
STALL_BOUND = 1200.0            # a job without a batch: TAKEOVER_BOUND, a run's start under load, its retries


def _expected(job: Job, batches: dict[str, list[list[dict]]], delay_ms: int):
    """The oracle over the batches the checkpoint's logs list, no-data batches included: nothing is closed by the
    watermark after the last of them (a continuous run stopped right after a data batch leaves those rows in the
    state for the next batch; the last run, with no new input, runs none: tests/support/oracle.py)."""
    if job.name == "user_activity":
        return oracle.user_activity(batches["events"], delay_ms)
    if job.name == "order_payments":
        return oracle.order_payments(batches["orders"], batches["payments"], delay_ms)
    if job.name == "user_sessions":
        return oracle.user_sessions(batches["events"], delay_ms, after_last=False)
    if job.name == "user_actions":
        return oracle.user_actions(batches["events"], delay_ms, after_last=False)
    return engagement_oracle.engagement(batches["events"], delay_ms)


def table(home: Home, job: Job, landing: Layout, delay_ms: int, records=None) -> tuple[dict, list[str]]:
    """The job's table against the oracle; `landing`: a local home holding its landing files (S3: a mirror);
    `records`: per Kafka topic, every record (partition, offset, time, bytes)."""
    kept = home.kept_logs(job.name)
    if job.source == "kafka":
        batches = {name: kafka_oracle.batches(kept, name, records[name]) for name in job.inputs}
        bad = sum(len(kafka_oracle.rejected(name, records[name])) for name in job.inputs)
    else:
        batches = {name: oracle.typed_batches(landing.landing(name), name, kept) for name in job.inputs}
        bad = sum(oracle.malformed_count(landing.landing(name), name) for name in job.inputs)
    expected = _expected(job, batches, delay_ms)
    layout = home.layout
    if job.name == "user_engagement":
        got_map, expected_map = engagement_oracle.table(layout), expected
        got, expected = set(got_map.items()), set(expected_map.items())
        rows = len(got_map)
    else:
        listed = table_rows(layout.table(job.name), TABLE_COLUMNS[job.name])
        got, rows = set(listed), len(listed)
    dead = len(table_rows(layout.deadletter_table(job.name), ["raw"])) if open_table(
        layout.deadletter_table(job.name)) else 0
    counts = {"batches": max(len(b) for b in batches.values()), "rows_in": sum(len(r) for b in batches.values()
                                                                                for r in b),
              "rows_out": rows, "expected": len(expected), "lost": len(expected - got), "invented": len(got - expected),
              "duplicated": rows - len(got), "dead_letters": dead, "bad_lines": bad}
    problems = [f"{home.kind} {job.name}: {counts[k]} {k} rows" for k in ("lost", "invented", "duplicated") if counts[k]]
    if dead != bad:
        problems.append(f"{home.kind} {job.name}: {dead} dead letters for {bad} bad lines")
    if not expected:
        problems.append(f"{home.kind} {job.name}: the oracle expects no row: no input was read")
    return counts, problems


def _intervals(rows: list[dict[str, Any]]) -> tuple[list[tuple[datetime, datetime | None, str]], list[str]]:
    """Maintenance lock holdings (acquired, released or None, runbook id) from the actions rows, oldest first."""
    held: dict[str, datetime] = {}
    spans, problems = [], []
    for row in rows:
        if row["action"] != "maintenance_lock":
            continue
        if row["phase"] == "acquired":
            held[row["runbook_id"]] = row["at"]
        elif row["phase"] == "released" and row["runbook_id"] in held:
            spans.append((held.pop(row["runbook_id"]), row["at"], row["runbook_id"]))
    spans += [(at, None, runbook) for runbook, at in held.items()]
    return sorted(spans, key=lambda s: s[0]), problems


def runbooks(home: Home, job: str) -> tuple[Counter, list[str]]:
    """Every runbook of the job ended (completed or rolled back) and released its lock; none overlapped another
    runbook or a retention item of the same job."""
    rows = actions.read(home.layout, job)
    spans, problems = _intervals(rows)
    outcomes: Counter = Counter()
    for start, end, runbook in spans:
        steps = [r for r in rows if r["runbook_id"] == runbook and r["action"].startswith("recovery.")]
        if end is None:
            problems.append(f"{home.kind} {job}: runbook {runbook} still holds the maintenance lock")
        rolled = any("rollback" in r["action"] and r["phase"] == "done" for r in steps)
        verified = any(r["action"] == "recovery.verify" and r["phase"] == "done" for r in steps)
        outcome = "rolled back" if rolled else "completed" if verified else "refused or failed before acting"
        if outcome.startswith("refused") and any(r["phase"] == "done" and r["action"] not in (
                "recovery.plan", "recovery.preflight") for r in steps):
            outcome = "ended without verify or rollback"
            problems.append(f"{home.kind} {job}: runbook {runbook} acted ({[r['action'] for r in steps]}) and "
                            "neither verified nor rolled back")
        outcomes[outcome] += 1
    for (s1, e1, r1), (s2, _e2, r2) in zip(spans, spans[1:]):
        if e1 is None or s2 < e1:
            problems.append(f"{home.kind} {job}: runbooks {r1} and {r2} held the job at once")
    retention = [r for r in rows if r["action"] == "retention" and r["phase"] == "done"]
    for row in retention:
        for start, end, runbook in spans:
            if start <= row["at"] and (end is None or row["at"] <= end):
                problems.append(f"{home.kind} {job}: retention acted at {row['at']} while runbook {runbook} held it")
    outcomes["retention items"] += len(retention)
    return outcomes, problems


def leases(home: Home, watch: Watch, faults: list[Fault]) -> tuple[dict, list[str]]:
    problems = []
    takeovers = 0
    for job in home.jobs:
        for row in actions.read(home.layout, job.name, "lease_takeover"):
            takeovers += 1
            if not row["details"].get("stale_reason"):
                problems.append(f"{home.kind} {job.name}: a live lease was taken over: {row['details']}")
        lease = home.lease(job.name)
        if lease is not None:
            problems.append(f"{home.kind} {job.name}: lease still held at the end: {lease.describe()}")
        lock = maintenance.current(home.layout, job.name)
        if lock is not None:
            problems.append(f"{home.kind} {job.name}: maintenance lock still held at the end: {lock}")
    times = []
    for fault in faults:
        if fault.home != home.kind or fault.kind not in ("kill_run", "freeze_run"):
            continue
        taken = watch.takeover_after(home.kind, fault.target, fault.at, fault.detail.get("lease"))
        if fault.kind == "freeze_run":  # only a takeover during the freeze counts: after the thaw the holder is live
            taken = fault.detail.get("taken_over_after_s")
        times.append(taken)
        if taken is None or taken > TAKEOVER_BOUND:
            problems.append(f"{home.kind} {fault.target}: no new holder within {TAKEOVER_BOUND:.0f} s of {fault.line()}")
        elif fault.kind == "freeze_run" and not fault.detail.get("thawed_stopped"):
            problems.append(f"{home.kind} {fault.target}: the thawed holder did not stop: {fault.line()}")
    return {"takeovers": takeovers, "takeover_s": [round(t, 1) for t in times if t is not None]}, problems


def ops_tables(home: Home) -> tuple[dict, list[str]]:
    """The progress and actions tables read with delta-rs (none there: unreadable); one that had grown past twice the
    files retention compacts at (`compact_min_files`, 10) when the last retention run acted was compacted by a
    retention run (an OPTIMIZE in its history). Files written after that run (the end's stop requests and last runs
    journal there) wait for the next one, which a run that ends does not have."""
    problems, counts = [], {}
    ran = [row["at"] for row in actions.read(home.layout, action="retention")]
    for name in ("progress", "actions"):
        path = home.layout.ops_table(name)
        try:
            table = open_table(path)
            counts[f"{name}_rows"] = table.to_pyarrow_table().num_rows
            counts[f"{name}_files"] = len(table.file_uris())
            history = table.history()
            compactions = sum(1 for c in history if c.get("operation") == "OPTIMIZE")
            then = [c["version"] for c in history if ran and c["timestamp"] <= max(ran).timestamp() * 1000]
            files_then = len(open_table(path, version=max(then)).file_uris()) if then else 0
        except Exception as err:  # noqa: BLE001 - an unreadable table is the violation
            problems.append(f"{home.kind}: ops table {name} unreadable: {err}")
            continue
        counts[f"{name}_compactions"] = compactions
        if not compactions and files_then >= 2 * COMPACT_MIN_FILES:
            problems.append(f"{home.kind}: ops table {name} never compacted ({files_then} files at the last "
                            f"retention run, {counts[f'{name}_files']} at the end)")
    return counts, problems


def stalls(home: Home, job: str, started: datetime, stopped: datetime) -> tuple[float, list[str]]:
    """The longest time (s) between two batches of the job's stateful query from the fleet's start to its stop, by
    the progress rows' batch times (a batch whose row a killed run never wrote lengthens a gap: never shortens it)."""
    rows = progress.read(home.layout, job).to_pylist()
    times = sorted(r["timestamp"] for r in rows if r["query_name"] == job and started <= r["timestamp"] <= stopped)
    edges = [started, *times, stopped]
    longest = max((b - a).total_seconds() for a, b in zip(edges, edges[1:]))
    problems = []
    if longest > STALL_BOUND:
        problems.append(f"{home.kind} {job}: no batch for {longest / 60:.0f} min while the fleet ran (bound "
                        f"{STALL_BOUND / 60:.0f} min)")
    return round(longest), problems


def memory(watch: Watch) -> tuple[list[str], list[str]]:
    """Per process that lived past the warm-up: its RSS at the end of the warm-up and at the last sample."""
    lines, problems = [], []
    for (what, pid), samples in sorted(watch.memory.items()):
        first_at = samples[0][0]
        after = [(t, rss) for t, rss in samples if t - first_at >= MEMORY_WARM_UP]
        if len(after) < 2:
            continue
        growth = after[-1][1] - after[0][1]
        lines.append(f"{what} (pid {pid}): {after[0][1]:.0f} -> {after[-1][1]:.0f} MiB over "
                     f"{(after[-1][0] - after[0][0]) / 60:.0f} min after warm-up ({growth:+.0f} MiB)")
        bound = DAEMON_GROWTH_MIB if "daemon" in what else DRIVER_GROWTH_MIB
        if growth > bound:
            problems.append(f"memory grew: {lines[-1]} (bound {bound:.0f} MiB)")
    return lines, problems


def _instance(home: Home):
    from dagster import DagsterInstance

    return DagsterInstance.from_config(home.dagster_home)


IN_FLIGHT = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
UNLAUNCHED = ("QUEUED", "NOT_STARTED")


def cancel_unlaunched(home: Home) -> None:
    """Cancel the runs the stopped daemon would have launched: those queued, and those a schedule's tick created
    and had not submitted yet when the daemon stopped (NOT_STARTED; a daemon started again resumes that tick and
    submits the run it had created: dagster/_scheduler/scheduler.py, the existing run of the request)."""
    with _instance(home) as instance:
        for run in instance.get_runs():
            if run.status.value in UNLAUNCHED:
                instance.report_run_canceled(run, message="the fleet soak stops: the daemon is stopped")


def active_runs(home: Home) -> list[str]:
    """The home's Dagster runs not ended yet: "<run id> of <job> <status>"."""
    with _instance(home) as instance:
        return [f"{run.run_id} of {run.job_name} {run.status.value}" for run in instance.get_runs()
                if run.status.value in IN_FLIGHT]


def dagster_runs(home: Home) -> tuple[Counter, list[str]]:
    """Every Dagster run of the home's instance has ended: counts by job and status."""
    with _instance(home) as instance:
        runs = instance.get_runs()
    by_status = Counter(f"{run.job_name} {run.status.value}" for run in runs)
    stuck = [f"{home.kind}: run {run.run_id} of {run.job_name} left {run.status.value}" for run in runs
             if run.status.value in IN_FLIGHT]
    return by_status, stuck
