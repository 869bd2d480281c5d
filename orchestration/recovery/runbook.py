"""The recovery runbook in Dagster: op job `state_recovery`, launched from the Launchpad (or by the sensors).

One op, `recover`, takes the runbook request as its Config (every field described, so the Launchpad explains
itself) and runs stateops.recovery through stateops.jobs.runtime.recovery: a dry run (the default) plans and changes nothing.
Each journal entry the executor writes becomes an event of the run while it happens: an AssetObservation of
the job's table for each finished step (its details as metadata), a log line for each started one. The
op's output metadata holds the plan (markdown and JSON), the before/after audits, the verification and the
outcome; a rollback or a failure fails the run with the same metadata.

One runbook per job at a time: the core refuses a second one (the maintenance lock); the op is also in
the `stateops_recovery` pool (one slot: a second runbook run waits) and tags its run `stateops/job`.
Stopping the job: the core's stop request; past its timeout, `terminate_holder` ends the Dagster run that
holds the job's lease through the instance (or refuses when the holder is not a run of this instance).
"""
# No `from __future__ import annotations`: Dagster reads the op function's annotations as types.
import json
import os
import signal
import time
from typing import Any, Callable, Literal, Mapping, Optional

from dagster import (AssetKey, AssetObservation, Config, DagsterInstance, Failure, JobDefinition, MetadataValue,
                     OpExecutionContext, Output, in_process_executor, job, op)
from pydantic import Field, create_model

from stateops.jobs.runtime.recovery import recover
from stateops.control.fence.lease import Lease
from stateops.storage.holders import HOST, alive
from stateops.errors import ConfigError
from stateops.recovery import MODES, RecoveryReport, RecoveryRequest
from stateops.runbooks import StepEvent
from stateops.recovery.model import RecoveryPlan
from stateops.recovery.request import described, launchpad_words, request_fields
from stateops.redaction import redact

from stateops.jobs.definition.spec import JobSpec
from stateops.dagster.failure import redacted_step, redacted
from stateops.dagster.resources import PathsResource, SparkResource

JOB_NAME = "state_recovery"
POOL = "stateops_recovery"
JOB_TAG = "stateops/job"
TERMINATE_GRACE_SECONDS = 60.0  # after the run launcher's terminate, before SIGKILL


def _config_fields() -> dict[str, Any]:
    """The Launchpad's fields: the request's (stateops.recovery.request), each described in the Launchpad's words;
    `mode` is a choice."""
    words, found = launchpad_words(), {}
    for name, info in request_fields().items():
        if not info.json_schema_extra["launchpad"]:
            continue
        description = described(name, words)
        annotation = {"job": str, "mode": Literal[MODES]}.get(name, info.annotation)
        found[name] = (annotation, Field(... if info.is_required() else info.default, description=description))
    return found


class RecoveryConfig(create_model("RecoveryRequestFields", __base__=Config, **_config_fields())):
    """The runbook request (stateops.recovery.RecoveryRequest) as the Launchpad asks for it."""

    def request(self, actor: str) -> RecoveryRequest:
        return RecoveryRequest(**self.model_dump(), actor=actor)


def check_config(config: RecoveryConfig, jobs: Mapping[str, JobSpec]) -> None:
    """What the config schema cannot say, in the Launchpad's words (field names, not the CLI's flags); `jobs`:
    the code location's."""
    if config.job not in jobs:
        raise ConfigError("job", f"unknown job {config.job!r}", f"use one of {', '.join(sorted(jobs))}")
    if not config.dry_run and config.confirm != config.job:
        got = f"confirm {config.confirm!r}" if config.confirm else "no confirm"
        raise ConfigError("confirm", f"{got} does not confirm the runbook on {config.job}",
                          f"set confirm: {config.job} (the job's name) to act, or dry_run: true to see the plan")


def terminate_holder(instance: DagsterInstance, log: Callable[[str], None],
                     grace_seconds: float = TERMINATE_GRACE_SECONDS) -> Callable[[Lease], bool]:
    """The runbook's last resort (`terminate=`): end the Dagster run holding the job's lease.

    Through the instance's run coordinator (a queued run is cancelled, a started one terminated by its run
    launcher, i.e. its code server: the run worker gets an interrupt and stops its query, measured 20 s).
    When the launcher cannot reach the run, or its process on this host still runs after `grace_seconds`,
    SIGKILL that process and report the run cancelled (a kill mid-batch leaves checkpoint and sink consistent:
    the exactly-once writer). False (the runbook refuses) for a holder that is not a run of this instance or
    that cannot be ended from here. The executor then waits for the lease to be released or to go stale."""
    def terminate(lease: Lease) -> bool:
        run = instance.get_run_by_id(lease.dagster_run_id) if lease.dagster_run_id else None
        if run is None:
            log(f"{lease.job}: the lease holder ({lease.describe()}) is not a run of this Dagster instance: refused")
            return False
        local = lease.host == HOST
        try:
            cancelled = instance.run_coordinator.cancel_run(run.run_id)
        except Exception as err:  # noqa: BLE001 (a launcher that cannot terminate, e.g. an in-process one)
            log(f"{lease.job}: the run launcher could not terminate Dagster run {run.run_id}: {err}")
            cancelled = False
        if cancelled:
            log(f"{lease.job}: terminating Dagster run {run.run_id} (it did not stop within the stop timeout)")
            deadline = time.monotonic() + grace_seconds
            while local and alive(lease.pid, lease.pid_started) and time.monotonic() < deadline:
                time.sleep(1)
        if not local:
            return cancelled
        if not alive(lease.pid, lease.pid_started):
            return True
        os.kill(lease.pid, signal.SIGKILL)
        if not instance.get_run_by_id(run.run_id).is_finished:
            instance.report_run_canceled(run, message=f"killed by the StateOps runbook: pid {lease.pid} did not stop")
        log(f"{lease.job}: killed pid {lease.pid} of Dagster run {run.run_id}")
        return True

    return terminate


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def step_event(asset: AssetKey, event: StepEvent) -> AssetObservation:
    return AssetObservation(asset_key=asset, description=f"runbook {event.runbook_id}: {event.step} {event.phase}",
                            metadata=redacted({"runbook_id": event.runbook_id, "step": event.step,
                                               "phase": event.phase, "at": event.at,
                                               "details": MetadataValue.json(_jsonable(event.details))}))


def state_rows_markdown(before: Optional[dict], after: Optional[dict]) -> str:
    """Rows and partitions per state store, before and after (the deep audits around the runbook)."""
    def stores(audit: Optional[dict]) -> dict[str, dict]:
        return {f"{op['operator_id']}/{op['store_name']}": op for op in (audit or {}).get("operators", [])}

    old, new = stores(before), stores(after)
    lines = ["| state store | rows before | rows after | partitions before | partitions after |",
             "|---|---:|---:|---:|---:|"]
    for name in sorted({*old, *new}):
        cells = [old.get(name, {}).get("rows_total"), new.get(name, {}).get("rows_total"),
                 old.get(name, {}).get("num_partitions"), new.get(name, {}).get("num_partitions")]
        lines.append(f"| {name} | " + " | ".join("-" if c is None else str(c) for c in cells) + " |")
    return "\n".join(lines)


def report_metadata(report: RecoveryReport) -> dict[str, Any]:
    """What the run shows: outcome, plan, audits, verification, the journal."""
    steps = ["| at | step | phase |", "|---|---|---|"] + [
        f"| {e['at']} | {e['step']} | {e['phase']} |" for e in report.steps]
    metadata = {
        "outcome": report.outcome,
        "summary": report.summary(),
        "runbook_id": report.runbook_id,
        "job": report.job,
        "mode": report.mode,
        "plan": MetadataValue.md(f"```\n{RecoveryPlan.from_dict(report.plan).render()}\n```"),
        "plan_json": MetadataValue.json(_jsonable(report.plan)),
        "state": MetadataValue.md(state_rows_markdown(report.audit_before, report.audit_after)),
        "audit_before": MetadataValue.json(_jsonable(report.audit_before or {})),
        "audit_after": MetadataValue.json(_jsonable(report.audit_after or {})),
        "verification": MetadataValue.json(_jsonable(report.verification or {})),
        "journal": MetadataValue.md("\n".join(steps)),
        "notes": MetadataValue.md("\n".join(f"- {n}" for n in report.notes) or "none"),
    }
    if report.archive_path:
        metadata["archive_path"] = MetadataValue.path(report.archive_path)
    if report.error:
        metadata["error"] = report.error
    if report.rollback:
        metadata["rollback"] = MetadataValue.json(_jsonable(report.rollback))
    return redacted(metadata)


def build_state_recovery(jobs: Mapping[str, JobSpec]) -> JobDefinition:
    """The `state_recovery` job for the code location's `jobs`."""

    @op(name="recover", pool=POOL, description="Plan the runbook (dry run) or run it: stop, archive, adjust, "
                                               "restart, verify, roll back on failure.")
    def recover_op(context: OpExecutionContext, config: RecoveryConfig, spark: SparkResource,
                   paths: PathsResource) -> Output:
        try:
            check_config(config, jobs)
        except ConfigError as err:
            raise Failure(description=redact(str(err)), allow_retries=False) from None
        context.instance.add_run_tags(context.run_id, {JOB_TAG: config.job})
        asset = AssetKey(jobs[config.job].output_asset)

        def on_event(event: StepEvent) -> None:
            if event.phase == "started":
                context.log.info(f"runbook {event.runbook_id}: {event.step} started")
            else:
                context.log_event(step_event(asset, event))

        with redacted_step():
            report = recover(paths.environment(), config.request(actor=f"dagster run {context.run_id}"),
                             spark=lambda: spark.spark_session,
                             on_event=on_event, terminate=terminate_holder(context.instance, context.log.warning))
        metadata = report_metadata(report)
        if report.outcome in ("rolled_back", "failed"):
            raise Failure(description=redact(report.summary()), metadata=metadata, allow_retries=False)
        context.log.info(redact(report.summary()))
        return Output(report.outcome, metadata=metadata)

    @job(name=JOB_NAME, executor_def=in_process_executor, description="Guarded state recovery of one streaming job (docs/operations.md, Recovery). Dry "
                                    "run by default: the plan is in the run's metadata; set dry_run: false and "
                                    "confirm: <job> to act.")
    def state_recovery():
        recover_op()

    return state_recovery
