"""The Dagster runs a tick must know about, as plain data for stateops.remediation.guards: what sensors
launched for a job (remediations and restarts, by tag), its deep audit runs, its last finished run, and
whether a run of a job is still in flight (the job and audit schedules skip then too: orchestration imports
this module, never the other way round)."""
from __future__ import annotations

import datetime as _dt
from typing import Any

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from stateops.remediation.guards import DAY, Launched
from stateops.remediation.model import TAG

ACTIVE = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
          DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
JOB_TAG, ACTION_TAG, KEY_TAG = f"{TAG}/job", f"{TAG}/action", f"{TAG}/key"


def _launched(record) -> Launched:
    run = record.dagster_run
    return Launched(run.run_id, record.create_timestamp.astimezone(_dt.timezone.utc), run.is_finished,
                    run.tags.get(KEY_TAG))


def remediations(instance: DagsterInstance, job: str, now: _dt.datetime, cooldown_seconds: int) -> list[Launched]:
    """Runs sensors launched to act on `job` (runbooks and restarts): the unfinished ones, and every one within
    the day (budget) or the cooldown, whichever is longer."""
    since = now - max(DAY, _dt.timedelta(seconds=cooldown_seconds))
    records = {r.dagster_run.run_id: r for r in [
        *instance.get_run_records(RunsFilter(tags={JOB_TAG: job}, created_after=since)),
        *instance.get_run_records(RunsFilter(tags={JOB_TAG: job}, statuses=ACTIVE))]}
    return [_launched(r) for r in records.values() if r.dagster_run.tags.get(ACTION_TAG) in ("remediate", "restart")]


def deep_audits(instance: DagsterInstance, audit_job: str) -> list[Launched]:
    """The latest runs of the job's deep audit (whoever launched them): in flight, or how long ago."""
    return [_launched(r) for r in instance.get_run_records(RunsFilter(job_name=audit_job), limit=5)]


def last_finished(instance: DagsterInstance, job_name: str) -> dict[str, Any] | None:
    """{run_id, status, ended_at} of the job's newest finished run, or None."""
    records = instance.get_run_records(RunsFilter(job_name=job_name, statuses=FINISHED), limit=1)
    if not records:
        return None
    record = records[0]
    ended = record.end_time or record.update_timestamp.timestamp()
    return {"run_id": record.dagster_run.run_id, "status": record.dagster_run.status.value,
            "ended_at": _dt.datetime.fromtimestamp(ended, tz=_dt.timezone.utc)}


def still_running(instance: DagsterInstance, job_name: str) -> str | None:
    """Why a new run of `job_name` must wait (its previous run is queued or running), or None."""
    records = instance.get_run_records(RunsFilter(job_name=job_name, statuses=ACTIVE), limit=1)
    return f"run {records[0].dagster_run.run_id} of {job_name} has not finished yet" if records else None
