"""What must hold after every fence trial (tests/support/faults/trial.py), each check returning the violations it
found, in words (an empty list: it holds); `violations` gives them by the invariant's name (INVARIANTS):

- the Delta log: versions contiguous from 0, each batch committed once (one `txn` per (app id, version), versions
  of an app id rising with the log);
- commit points (a checkpoint's offsets/N, commits/N, metadata, its file source's log, Delta's N.json) written
  once: one object version each on S3 (the bucket is versioned) and the process that wrote it; created once on
  local disk (inotify);
- the table against the batch recomputation of all input (no duplicate, nothing lost or invented, every malformed
  line a dead letter);
- no live lease taken over (the `lease_takeover` actions name the stale reason), the old holder stopped by itself
  once another took over (exit 1, "lost its lease"), and on S3 nothing it wrote landed after it learned so;
- the taker never evicted: the run that took the lease over ended 0, and a continuous taker still ran and committed
  the files landed after the old holder thawed and stopped (a stale holder's late record write never makes it stop);
- liveness: the takeover came within the lease timeout plus the stated bound, and a last run finished the input.
"""
from __future__ import annotations

import json
import posixpath

from stateops import actions
from stateops.jobs.definition.environment import get_job
from stateops.layout import Layout
from stateops.storage import filesystem

from tests.support.faults.history import COMMIT_POINTS, commit_point_kind, rewritten_commit_points, versions
from tests.support.faults.trial import CONFIG_FILE, JOB, SCENARIOS, TAKEOVER_BOUND, TTL, Store, Trial
from tests.support.outcomes import local_mirror, outcome


def delta_log(table: str) -> list[str]:
    """The Delta log of `table`: versions contiguous from 0; no (app id, version) transaction twice; an app id's
    versions rise with the log."""
    fs, path = filesystem(posixpath.join(table, "_delta_log"))
    if not fs.exists(path):
        return []
    names = sorted(posixpath.basename(p) for p in fs.ls(path, detail=False) if p.endswith(".json"))
    numbers = [int(name.split(".")[0]) for name in names]
    found = [] if numbers == list(range(len(numbers))) else [f"{table}: Delta log versions {numbers} not contiguous"]
    seen: dict[tuple[str, int], int] = {}
    newest: dict[str, int] = {}
    for number, name in zip(numbers, names):
        with fs.open(posixpath.join(path, name)) as handle:
            for line in handle.read().decode().splitlines():
                txn = json.loads(line).get("txn") if line.strip() else None
                if not txn:
                    continue
                key = (txn["appId"], txn["version"])
                if key in seen:
                    found.append(f"{table}: batch {txn['version']} of {txn['appId']} committed twice (Delta versions "
                                 f"{seen[key]} and {number})")
                seen[key] = number
                if txn["version"] < newest.get(txn["appId"], -1):
                    found.append(f"{table}: Delta version {number} commits batch {txn['version']} after batch "
                                 f"{newest[txn['appId']]}")
                newest[txn["appId"]] = max(txn["version"], newest.get(txn["appId"], -1))
    return found


def commit_points(store: Store, trial: Trial) -> list[str]:
    """Every commit point written once: one version on S3 (naming who wrote each), created once on local disk."""
    if store.kind == "local":
        return [f"{path}: created {count} times" for path, count in sorted(trial.creations.items()) if count > 1]
    prefix = store.home.removeprefix(f"s3://{store.s3.bucket}/") + "/"
    writers: dict[str, list[str]] = {}
    for label, entries in trial.proxy_entries.items():
        for entry in entries:
            key = entry.key.split("/", 1)[1] if "/" in entry.key else entry.key
            if entry.method == "PUT" and entry.status is not None and 200 <= entry.status < 300 \
                    and commit_point_kind(key):
                writers.setdefault(key, []).append(label)
    history = versions(store.s3, store.s3.bucket, prefix)
    return [f"{key}: written {len(found)} times (landed PUTs by {writers.get(key, ['?'])})"
            for key, found in sorted(rewritten_commit_points(history, tuple(COMMIT_POINTS)).items())]


def against_oracle(store: Store) -> list[str]:
    """The table against the batch recomputation of every input file (tests/support/outcomes.py)."""
    layout = store.layout
    spec = get_job(JOB, config_path=posixpath.join(store.work, CONFIG_FILE), layout=layout)
    local = layout if store.kind == "local" else local_mirror(layout, spec, f"{store.work}/mirror")
    counts = outcome(layout, spec, local)
    problems = [f"table: {counts[k]} {k} rows" for k in ("duplicates", "lost", "invented") if counts[k]]
    if counts["dead_letters"] != counts["malformed_lines"]:
        problems.append(f"dead letters {counts['dead_letters']} != malformed lines {counts['malformed_lines']}")
    if not counts["expected_rows"]:
        problems.append("the oracle expects no rows: the trial ran no input")
    return problems


def leases(store: Store) -> list[str]:
    """No live lease taken over: each `lease_takeover` names why the lease it took was stale."""
    return [f"a live lease was taken over: {row['details']}" for row in actions.read(store.layout, JOB, "lease_takeover")
            if not (json.loads(row["details"]) if isinstance(row["details"], str) else row["details"]).get(
                "stale_reason")]


# What a stopped holder may end with: its lease lost, or, cut off from the store, the store unreachable (it cannot
# learn that it lost the lease, and stops for that reason); either way one line, exit 1.
STOPPED = ("lost its lease", "failed (Could not connect")


def stale_holder(trial: Trial) -> list[str]:
    """Once another run took the lease over, A stopped by itself (exit 1, one line: "lost its lease", or the store
    unreachable when it was cut off); on S3 none of its writes landed after it said it had stopped writing (its line
    `lost its lease at T0 ...; writes stopped at T1`: a write allowed before T0 may end in between): not to the
    job's checkpoints or tables, nor to the ops tables (progress rows, idle reports). What it does on its way out of
    the control plane (releasing its own control lock by a conditional delete) is no write of the job's."""
    if SCENARIOS[trial.scenario].kills or trial.takeover_at is None:
        return []
    found = []
    error = [line for line in trial.a_output.splitlines() if line.startswith("Error: ")]
    if trial.a_exit != 1 or len(error) != 1 or not any(why in error[0] for why in STOPPED) \
            or "Traceback" in trial.a_output or "Fatal Python error" in trial.a_output:
        tail = error or trial.a_output.strip().splitlines()[-1:] or ["(no output)"]
        found.append(f"A did not stop by itself after the takeover: exit {trial.a_exit}, {tail[0][:300]}")
    if trial.a_learned_at is not None:
        late = [e for e in trial.proxy_entries.get("A", []) if e.mutating and e.landed
                and e.wall_received > trial.a_learned_at and "/control/" not in e.key]
        found += [f"A wrote {e.method} {e.key} ({e.status}) {e.wall_received - trial.a_learned_at:.2f} s after it "
                  "said its writes had stopped (lost its lease)" for e in late]
    return found


def taker(trial: Trial) -> list[str]:
    """The run that took the lease over kept it: it ended 0 (asked to stop, when continuous), and a continuous one
    was still running and committed the files landed after A thawed and stopped."""
    if trial.takeover_at is None:
        return []
    found = []
    if SCENARIOS[trial.scenario].taker == "continuous" and trial.taker_after_thaw != "running and writing":
        found.append(f"after A thawed: {trial.taker_after_thaw or 'B no longer ran'}")
    if trial.b_exit != 0:
        found.append(f"B, which took the lease over, ended {trial.b_exit}")
    return found


def liveness(trial: Trial) -> list[str]:
    """The takeover came within the lease timeout plus the bound (where the fault must cause one), and the run
    after the fault finished the input."""
    found = []
    if SCENARIOS[trial.scenario].takeover and trial.takeover_at is None:
        found.append("no run took the lease over")
    elif trial.takeover_at is not None and trial.fault_at is not None:
        waited = trial.takeover_at - trial.fault_at
        if waited > TTL + TAKEOVER_BOUND:
            found.append(f"the takeover came {waited:.1f} s after the fault (bound {TTL + TAKEOVER_BOUND:g} s)")
    if trial.c_exit != 0:
        found.append(f"the last run ended {trial.c_exit}: the job could not go on")
    return found


def _delta_logs(store: Store, trial: Trial) -> list[str]:
    layout: Layout = store.layout
    return delta_log(layout.table(JOB)) + delta_log(layout.deadletter_table(JOB))


# Every invariant by name: (store, trial) -> its violations.
INVARIANTS = {
    "delta log": _delta_logs,
    "commit points": commit_points,
    "leases": lambda store, trial: leases(store),
    "stale holder": lambda store, trial: stale_holder(trial),
    "taker": lambda store, trial: taker(trial),
    "liveness": lambda store, trial: liveness(trial),
    "table": lambda store, trial: against_oracle(store),
}


def violations(store: Store, trial: Trial) -> dict[str, list[str]]:
    """The violations of each invariant that does not hold, by its name ({}: every one holds)."""
    found = {name: check(store, trial) for name, check in INVARIANTS.items()}
    return {name: problems for name, problems in found.items() if problems}


def count(found: dict[str, list[str]]) -> int:
    return sum(len(problems) for problems in found.values())


def report(store: Store, trial: Trial, found: dict[str, list[str]]) -> str:
    """What a failing assertion prints: the trial, the violations by invariant, the outputs and the proxy logs."""
    outputs = "\n".join(f"--- {name} ---\n{text}" for name, text in trial.outputs.items())
    lines = [f"{name} ({len(problems)}):\n    " + "\n    ".join(problems) for name, problems in found.items()]
    return (f"{trial.describe()}\nviolations:\n  " + ("\n  ".join(lines) or "none")
            + f"\n{outputs}\n{trial.proxy_log}")
