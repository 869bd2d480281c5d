"""`query_health_sensor` (stalled, stale or failed queries get a restart) and `stateops_run_failure_alert`
(every failed run of this code location goes to the webhook)."""
from __future__ import annotations

import datetime as _dt

from dagster import (DefaultSensorStatus, RunFailureSensorContext, SensorDefinition, SensorEvaluationContext,
                     run_failure_sensor, sensor)

from stateops.control import job_status, overrides
from stateops.errors import StateOpsError
from stateops.remediation.alerts import Alert, WebhookSettings, sender_for
from stateops.remediation.model import TAG
from stateops.remediation.observed import stream_health
from stateops.remediation.signals import HEALTH_COLUMNS, latest_audits, latest_batches
from stateops.remediation.tick import Watched, current_queries, health_decisions

from stateops.jobs.definition.environment import Environment

from stateops.sensors import runs
from stateops.sensors.ticks import Paths, Targets, evaluate

HEALTH_DESCRIPTION = (
    "Each tick reports every job's stream health on its asset (health/*: the lease's state, the newest batch and its "
    "age, the Kafka lag, the newest audit's findings), so the asset page shows the stream between runs. "
    "A query whose progress stopped while its lease is held (no batch for progress_timeout_seconds although "
    "input waits) -> the runbook restarts it (adjust, same settings); a stale lease or a failed last run -> a "
    "new run of the job, which takes the lease over (a stale lease's Dagster run, still in flight for Dagster, is "
    "marked failed first, which frees its slot in the job's pool).")


def build_health_sensor(targets: Targets, jobs: list, interval: int) -> SensorDefinition:
    @sensor(name="query_health_sensor", description=HEALTH_DESCRIPTION, jobs=jobs, minimum_interval_seconds=interval,
            default_status=DefaultSensorStatus.STOPPED)
    def _sensor(context: SensorEvaluationContext, paths: Paths):
        read: dict[str, dict] = {}  # the statuses and newest batches decide read, which observe reports

        def decide(environment: Environment, watched: list[Watched], now: _dt.datetime):
            layout, settings = environment.layout, environment.settings.control
            forced = overrides.in_force_by_job(layout)  # one read of each table and of the runs for all jobs
            statuses = read["statuses"] = {
                w.job: job_status(layout, w.job, w.checkpoint, settings, forced=forced.get(w.job, {})) for w in watched}
            batches = read["batches"] = latest_batches(layout, HEALTH_COLUMNS) or {}
            for status in statuses.values():
                if status["state"] == "stale":
                    ended = runs.end_stale_holder(context.instance, status["lease"])
                    if ended:
                        context.log.info(f"{status['job']}: run {ended} of the stale lease marked failed")
            finished = runs.last_finished_by_job(context.instance, [targets.job_run(w.job) for w in watched])
            last = {w.job: finished[targets.job_run(w.job)] for w in watched}
            return health_decisions(layout, watched, statuses, last, now, batches=batches)

        def observe(environment: Environment, watched: list[Watched], now: _dt.datetime):
            audits = latest_audits(environment.layout, current_queries(watched).values())
            return {w.job: stream_health(read["statuses"][w.job], read["batches"].get(w.job), audits.get(w.job), now)
                    for w in watched}

        return evaluate(context, "query_health_sensor", paths, decide, targets, observe=observe)

    return _sensor


@run_failure_sensor(name="stateops_run_failure_alert", default_status=DefaultSensorStatus.STOPPED,
                    description="Every failed run of this code location: its job, run id, error and StateOps tags, "
                                "to the webhook (STATEOPS_ALERT_WEBHOOK_URL) and the sensor's log.")
def run_failure_alert(context: RunFailureSensorContext):
    run = context.dagster_run
    error = (context.failure_event.message or "").strip().splitlines()
    text = f"run {run.run_id} of {run.job_name} failed: {error[0] if error else 'no message'}"
    context.log.info(text)
    try:
        webhook = WebhookSettings.from_env()  # a sensor tick is an entry point: its environment, read once
    except StateOpsError as err:
        context.log.warning(f"no webhook alerts: {err}")
        return
    sender = sender_for(webhook)
    if sender is not None:
        tags = {k: v for k, v in run.tags.items() if k.startswith(f"{TAG}/")}
        sender.send(Alert(f"{run.job_name} failed", text, "error", {"run": run.run_id, **tags}))
