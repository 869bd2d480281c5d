"""The Dagster runs a tick must know about, as plain data for stateops.remediation.guards: what sensors
launched for a job (remediations and restarts, by tag), its deep audit runs, its last finished run, and
whether a run of a job is still in flight (the job and audit schedules skip then too: orchestration imports
this module, never the other way round); and the one run state a tick changes: a stale lease's run ended."""
from __future__ import annotations

import datetime as _dt
from typing import Any, Mapping, Sequence

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.storage.dagster_run import JobBucket

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
    return last_finished_by_job(instance, [job_name])[job_name]


def last_finished_by_job(instance: DagsterInstance, job_names: Sequence[str]) -> dict[str, dict[str, Any] | None]:
    """Job name -> last_finished, from one query of the run storage for all of them (a bucket of one run per
    job name): a tick over 1,000 jobs made 1,000 queries."""
    found: dict[str, dict[str, Any] | None] = {name: None for name in job_names}
    if not found:
        return found
    records = instance.get_run_records(RunsFilter(statuses=FINISHED),
                                       bucket_by=JobBucket(job_names=list(found), bucket_limit=1))
    for record in records:
        run = record.dagster_run
        if run.job_name in found and found[run.job_name] is None:
            ended = record.end_time or record.update_timestamp.timestamp()
            found[run.job_name] = {"run_id": run.run_id, "status": run.status.value,
                                   "ended_at": _dt.datetime.fromtimestamp(ended, tz=_dt.timezone.utc)}
    return found


def still_running(instance: DagsterInstance, job_name: str) -> str | None:
    """Why a new run of `job_name` must wait (its previous run is queued or running), or None."""
    records = instance.get_run_records(RunsFilter(job_name=job_name, statuses=ACTIVE), limit=1)
    return f"run {records[0].dagster_run.run_id} of {job_name} has not finished yet" if records else None


def end_stale_holder(instance: DagsterInstance, lease: Mapping[str, Any]) -> str | None:
    """End, for Dagster, the run of a stale lease: marked failed while Dagster still has it in flight, and its
    concurrency slots freed either way; returns its run id when it was marked failed, else None.

    Why: a run killed with -9 (or frozen past its lease) never reports its own end. Dagster's default run launcher
    either keeps it STARTED (it cannot see a run worker die) or marks it failed from its code server but leaves
    its slot claimed (slots of ended runs are freed only by run monitoring, off by default). Either way the run that
    should take the stale lease over waits behind the job's pool (limit 1, orchestration/dagster.yaml) forever,
    measured in the fleet soak. The lease is the authority on who runs the job; a holder that thaws later finds its
    lease taken and stops."""
    run_id = lease.get("dagster_run_id")
    run = instance.get_run_by_id(run_id) if run_id else None
    if run is None:
        return None
    marked = run.status in ACTIVE
    if marked:
        instance.report_run_failed(run, message=f"StateOps: the lease of this run went stale ("
                                                f"{lease.get('stale_reason')}); query_health_sensor marks it failed "
                                                "so that a new run can take the lease over (a holder that comes back "
                                                "finds its lease taken and stops)")
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)
    return run_id if marked else None
