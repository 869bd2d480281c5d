"""The sensors through the real Dagster daemon (`dagster-daemon run`, its own process, a temporary DAGSTER_HOME):
sensors switched on through the instance, the daemon ticks them, launches the runs they request in processes
of their own, and persists their cursors; the test writes the input, runs the job and the deep audits with
real Spark, and checks what the daemon did in the instance and what the runbook did to the state (Spark's
state reader as the oracle).

The code location is StateOps' own (stateops.dagster.definitions) with the real `state_recovery` job. The three
tests share one daemon and one home, in order: plan mode and a daemon restart, then auto mode's rebuild of the
skewed state, then auto mode's adjust of the growing state.
"""
import os
import time

import pytest
from dagster import AssetKey, RunsFilter
from dagster._core.scheduler.instigation import TickStatus

from stateops.jobs.definition.environment import read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.remediation.guards import Cursor

from tests.support.audit_queries import oracle_rows
from tests.support.servers.dagster_daemon import DEADLINE

pytestmark = [pytest.mark.e2e, pytest.mark.long, pytest.mark.usefixtures("daemon_env")]

JOB = "user_activity"
SKEW, GROWTH = "state_skew_sensor", "state_growth_sensor"
LOCATION = "stateops_sensors_e2e"
def switch(world, name: str, on: bool):
    sensor = world.repo.get_sensor(name)
    if on:
        world.instance.start_sensor(sensor)
    else:
        world.instance.stop_sensor(sensor.get_remote_origin_id(), sensor.selector_id, sensor)


def ticks(world, name: str, after: float):
    sensor = world.repo.get_sensor(name)
    return world.instance.get_ticks(sensor.get_remote_origin_id(), sensor.selector_id, after=after)


def done(found):
    """The ticks that ended (a tick in progress is STARTED)."""
    return [t for t in found if t.status != TickStatus.STARTED]


def cursor(world, name: str) -> Cursor:
    sensor = world.repo.get_sensor(name)
    state = world.instance.get_instigator_state(sensor.get_remote_origin_id(), sensor.selector_id)
    return Cursor.parse(state.instigator_data.cursor)


def wait(what: str, probe, deadline: float = DEADLINE):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"waited {deadline} s for {what}")


def runbook_runs(world, **tags):
    return world.instance.get_runs(RunsFilter(job_name="state_recovery", tags={f"stateops/{k}": v
                                                                                  for k, v in tags.items()}))


def finished(world, run):
    done = wait(f"run {run.run_id} to finish", lambda: (r := world.instance.get_run_by_id(run.run_id)).is_finished
                and r)
    assert done.is_success, open(os.path.join(world.tmp, "daemon.log")).read()[-3000:]
    return done


def request_of(run) -> dict:
    """The runbook request in the run's config (the op whose config carries job, mode, dry_run)."""
    [config] = [op["config"] for op in run.run_config["ops"].values() if "mode" in op.get("config", {})]
    return config


def skew_findings(report):
    return [f for f in report.findings if f.code == "STATE_SKEW"]


def test_daemon_launches_one_runbook_per_finding_and_its_cursor_survives_a_restart(spark, daemon_world):
    world = daemon_world
    generate(world.layout, GeneratorConfig(events=800, files=4, users=100, clustered_share=0.9,
                                           clustered_partitions=4, minutes_per_file=15, seed=31))
    run_job(spark, world.spec(), world.layout, settings=read_settings())
    audit_id, report = world.audit(spark)
    assert skew_findings(report), [f.code for f in report.findings]

    world.daemon.start()
    started = time.time()
    switch(world, SKEW, True)
    [run] = wait("the skew sensor's runbook run", lambda: runbook_runs(world, audit_id=audit_id))
    tags = run.tags
    assert tags["dagster/sensor_name"] == SKEW and tags["stateops/finding_code"] == "STATE_SKEW"
    assert tags["stateops/rule"] == "skew.many_keys -> rebuild 4 -> 9 partitions", tags
    request = request_of(run)
    assert (request["job"], request["mode"], request["shuffle_partitions"], request["dry_run"]) == (
        JOB, "rebuild", 9, True)  # plan mode: a dry run whose plan waits for a person
    assert audit_id in request["reason"]
    finished(world, run)
    # The job's asset shows the remediation, linked to the run by its run key.
    [observation] = world.instance.fetch_observations(AssetKey(JOB), limit=1).records
    metadata = observation.asset_observation.metadata
    assert metadata["remediation/audit_id"].value == audit_id
    assert metadata["remediation/run_key"].value == tags["dagster/run_key"]
    assert metadata["remediation/rule"].value == tags["stateops/rule"]
    wait("a tick after the launch", lambda: [t for t in ticks(world, SKEW, started) if t.status == TickStatus.SKIPPED])
    assert cursor(world, SKEW).has_acted(JOB, tags["stateops/key"])

    # A fresh daemon, and the launched run gone from the instance (retention): only the persisted cursor knows
    # the finding was acted on. The ticks after the restart skip it; nothing is launched again.
    world.daemon.stop()
    world.instance.delete_run(run.run_id)
    restarted = time.time()
    world.daemon.start()
    after = wait("two ticks of the restarted daemon", lambda: len(t := done(ticks(world, SKEW, restarted))) >= 2 and t)
    for tick in after:
        assert tick.status == TickStatus.SKIPPED and not tick.run_ids, (tick.status, tick.run_ids)
        assert f"{tags['stateops/key']} was already acted on (would remediate" in tick.skip_reason, tick.skip_reason
    assert not runbook_runs(world)
    switch(world, SKEW, False)


def test_daemon_rebuild_with_more_partitions_clears_the_skew(spark, daemon_world):
    world = daemon_world
    world.configure("auto")
    audit_id, report = world.audit(spark)  # a new deep audit: a new finding, acted on now
    assert skew_findings(report)
    switch(world, SKEW, True)
    [run] = wait("the rebuild run", lambda: runbook_runs(world, audit_id=audit_id))
    request = request_of(run)
    assert (request["mode"], request["shuffle_partitions"], request["dry_run"], request["confirm"]) == (
        "rebuild", 9, False, JOB)
    finished(world, run)
    switch(world, SKEW, False)

    _after_id, after = world.audit(spark)
    assert not skew_findings(after), [(f.code, f.message) for f in after.findings]
    rows = oracle_rows(spark, world.spec().checkpoint_path(world.layout), operatorId=int(
        run.tags["stateops/key"].split(":")[2]))
    assert len(rows) > 4 and max(rows.values()) / sum(rows.values()) < 0.6, rows  # spread over 9 partitions


def test_daemon_adjust_with_a_tighter_delay_stops_the_growth(spark, daemon_world):
    world = daemon_world
    world.configure("auto")
    before_id, before = world.audit(spark)
    generate(world.layout, GeneratorConfig(events=1800, files=6, users=300, minutes_per_file=10, seed=6,
                                           start="2026-01-01T01:00:00+00:00"))
    run_job(spark, world.spec(), world.layout, settings=read_settings())
    growth_id, grown = world.audit(spark)
    assert "STATE_GROWTH" in [f.code for f in grown.findings], [f.code for f in grown.findings]
    switch(world, GROWTH, True)
    [run] = wait("the adjust run", lambda: runbook_runs(world, audit_id=growth_id))
    request = request_of(run)
    assert (request["mode"], request["watermark_delay"], request["dry_run"]) == ("adjust", "12 minutes", False)
    finished(world, run)
    switch(world, GROWTH, False)
    assert world.spec().watermark_delay == "12 minutes"

    generate(world.layout, GeneratorConfig(events=1200, files=6, users=300, minutes_per_file=10, seed=7,
                                           start="2026-01-01T02:00:00+00:00"))
    run_job(spark, world.spec(), world.layout, settings=read_settings())
    _id, after = world.audit(spark)  # (STATE_GROWTH compares with the oldest audit of the day: not the oracle)
    checkpoint = world.spec().checkpoint_path(world.layout)
    rows_after = sum(sum(oracle_rows(spark, checkpoint, operatorId=op.operator_id).values()) for op in after.operators)
    rows_grown = sum(op.rows_total for op in grown.operators)
    assert rows_grown > 1.5 * sum(op.rows_total for op in before.operators)  # it was growing
    assert rows_after < rows_grown, (rows_after, rows_grown)  # and the tighter delay evicted: it stopped
