"""One writer per job under freezes, delays, partitions and skewed clocks (issue 43), in the manner of Jepsen: two
StateOps processes for one job, a fault on the first at an exact moment, and the invariants after every trial
(tests/support/faults/trial.py runs a trial, tests/support/faults/invariants.py checks it), on a local home and on
the S3 API server, on delta-rs and on Delta's Spark writer. A failing trial prints its schedule, the violations, the
processes' output and every request each process's proxy saw.

The negative control runs the fenced scenarios with the fence off (a live lease taken anyway, never found lost,
Spark's and Delta's stock commit writers): each must report violations, so the checks are shown able to fail.
The randomized mode draws the scenario, the store, the writer and the moment from a seed.

Long tier: each trial starts three StateOps processes (about a minute and a half).
"""
from __future__ import annotations

import random

import pytest

from tests.support.delta_writers import MISSING_JARS, spark_writer_available
from tests.support.faults.invariants import count, report, violations
from tests.support.faults.trial import FENCED, SCENARIOS, fresh_local, fresh_s3, run_trial
from tests.support.kill_trials import record_counts
from tests.support.tiers import trials

pytestmark = [pytest.mark.e2e, pytest.mark.long]

WRITERS = ("delta-rs", "spark")
CASES = [pytest.param(name, store, writer, id=f"{name}-{store}-{writer}")
         for name, scenario in SCENARIOS.items() for store in scenario.stores for writer in WRITERS]
RANDOM_TRIALS = trials(5, full=50)


def _store(kind: str, tmp_path, s3_versioned_bucket_factory):
    if kind == "local":
        return fresh_local(tmp_path)
    client, env = s3_versioned_bucket_factory()
    return fresh_s3(tmp_path, client, env, "home")


def _needs(writer: str) -> None:
    if writer == "spark" and not spark_writer_available():
        pytest.skip(MISSING_JARS)


def _record(record_property, trial, found: dict[str, list[str]]) -> None:
    """The trial's figures in the run's "fault suite counts" section: how long the takeover and A's stop took, and
    how long A took from finding the loss to having stopped writing (revoked, a write under way ended)."""
    takeover = trial.takeover_at - trial.fault_at if trial.takeover_at and trial.fault_at else None
    stopped = trial.a_learned_at - trial.fault_ended_at if trial.a_learned_at and trial.fault_ended_at else None
    record_counts(record_property, f"fence {trial.scenario} {trial.store} {trial.writer} fence "
                                   f"{'on' if trial.fence else 'off'}",
                  {"takeover_after_fault_s": None if takeover is None else round(takeover, 1),
                   "old_holder_learned_after_fault_ended_s": None if stopped is None else round(stopped, 1),
                   "old_holder_writes_stopped_after_found_s": None if not (trial.a_found_at and trial.a_learned_at)
                   else round(trial.a_learned_at - trial.a_found_at, 2),
                   "b_attempts": trial.b_attempts, "violations": count(found)})


@pytest.mark.parametrize("scenario,store_kind,writer", CASES)
def test_the_invariants_hold(scenario, store_kind, writer, tmp_path, fence_bucket, record_property):
    _needs(writer)
    store = _store(store_kind, tmp_path, fence_bucket)
    trial = run_trial(store, scenario, writer)
    found = violations(store, trial)
    _record(record_property, trial, found)
    assert found == {}, report(store, trial, found)


@pytest.mark.parametrize("scenario,store_kind", [pytest.param(s, k, id=f"{s}-{k}") for s in FENCED
                                                 for k in SCENARIOS[s].stores])
def test_with_the_fence_off_the_checks_find_violations(scenario, store_kind, tmp_path, fence_bucket,
                                                       record_property):
    writer = "spark" if scenario == "hold-delta-commit" else "delta-rs"  # delta-rs' own commit is create-once
    _needs(writer)
    store = _store(store_kind, tmp_path, fence_bucket)
    trial = run_trial(store, scenario, writer, fence=False)
    found = violations(store, trial)
    _record(record_property, trial, found)
    assert found, report(store, trial, found)
    name, problems = next(iter(found.items()))
    print(f"{scenario} on {store_kind}, fence off: {count(found)} violations of {sorted(found)}, e.g. {name}: "
          f"{problems[0]}")


@pytest.mark.parametrize("seed", range(RANDOM_TRIALS))
def test_randomized_trials(seed, tmp_path, fence_bucket, record_property):
    rng = random.Random(4300 + seed)
    scenario = rng.choice(sorted(SCENARIOS))
    store_kind = rng.choice(SCENARIOS[scenario].stores)
    writer = rng.choice([w for w in WRITERS if w == "delta-rs" or spark_writer_available()])
    store = _store(store_kind, tmp_path, fence_bucket)
    trial = run_trial(store, scenario, writer, seed=4300 + seed, at_batch=rng.randint(1, 2),
                      start_delay=rng.uniform(0.0, 1.5))
    found = violations(store, trial)
    _record(record_property, trial, found)
    assert found == {}, report(store, trial, found)
