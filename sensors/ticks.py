"""What every StateOps sensor does with its decisions: guard them, turn them into run requests, observations
on the job's asset and alerts, persist the cursor, and say why nothing happened.

A tick never raises: an unreadable ops table or config becomes the tick's SkipReason (the daemon logs it
and the next tick tries again).
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from dagster import (AssetKey, AssetObservation, ConfigurableResource, MetadataValue, RunRequest, SensorEvaluationContext,
                     SensorResult)

from stateops.jobs.definition.catalog import Catalog, reusing_unchanged
from stateops.jobs.definition.environment import Environment
from stateops.jobs.definition.settings import effective_spec
from stateops.jobs.definition.spec import JobSpec
from stateops.control import maintenance, overrides
from stateops.errors import StateOpsError, first_line
from stateops.layout import Layout
from stateops.remediation.alerts import Alert, sender_for
from stateops.remediation.guards import Cursor, guard, guard_escalation
from stateops.remediation import observed
from stateops.remediation.model import Decision
from stateops.remediation.policy import Policy
from stateops.remediation.tick import Watched

from stateops.sensors import runs
from stateops.sensors.runbook import RUNBOOK_JOB, runbook_run_config

Decide = Callable[[Environment, list[Watched], _dt.datetime], "dict[str, Decision]"]
# job -> its stream's health as the asset shows it between runs (stateops.remediation.observed), after `decide`
Observe = Callable[[Environment, list[Watched], _dt.datetime], "dict[str, dict[str, Any]]"]
# A sensor's `paths` parameter: the code location's stateops.dagster.resources.PathsResource (it has `.layout` and
# `.environment()`), typed by its base class so that sensors never import orchestration, which composes them.
Paths = ConfigurableResource


@dataclass(frozen=True)
class Targets:
    """The Dagster jobs a sensor may launch, by what they are for (None: not in this code location)."""

    deep_audit: Callable[[str], str] | None = None  # StateOps job -> its deep audit job
    job_run: Callable[[str], str] | None = None  # StateOps job -> the job's own run (`<job>_job`)
    runbook: Any = None  # the state_recovery job definition


def watched(catalog: Catalog) -> tuple[Mapping[str, JobSpec], list[Watched]]:
    """Every configured job with its policy, thresholds and settings in force (ConfigError when invalid)."""
    layout, out = catalog.layout, []
    forced = overrides.in_force_by_job(layout)  # one read of the overrides table for every job
    for spec in catalog.jobs.values():
        effective = effective_spec(spec, layout, forced.get(spec.name, {}))
        out.append(Watched(spec.name, spec.checkpoint_path(layout), catalog.policy(spec.name),
                           catalog.thresholds(spec.name), effective.watermark_delay, spec.watermark_min,
                           tuple(i.landing(layout) for i in spec.inputs) if spec.source == "json" else ()))
    return catalog.jobs, out


def evaluate(context: SensorEvaluationContext, sensor: str, paths: Paths, decide: Decide, targets: Targets,
             now: _dt.datetime | None = None, observe: Observe | None = None) -> SensorResult:
    """One tick: the environment read once (paths.environment()), the catalog, `decide`, then the guards;
    `observe`: each job's health, reported on its asset when due (observed.due)."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    cursor = Cursor.parse(context.cursor)
    try:
        environment = paths.environment()
        layout = environment.layout
        with reusing_unchanged():  # once per tick: a policy edited applies next tick; an unchanged file is
            catalog = environment.catalog  # not validated again
        specs, jobs = watched(catalog)
        decisions = decide(environment, jobs, now)
        health = observe(environment, jobs, now) if observe is not None else {}
    except StateOpsError as err:  # an unreadable ops table, a broken config: skip, the next tick tries again
        return SensorResult(skip_reason=f"{sensor}: {first_line(err)}", cursor=cursor.dumps())
    policies = {w.job: w.policy for w in jobs}
    requests, events, reasons = [], [], []
    for job, metadata in sorted(health.items()):
        if observed.due(metadata, cursor.reported.get(job), now):
            cursor.reported[job] = (observed.fingerprint(metadata), now.isoformat())
            events.append(AssetObservation(asset_key=AssetKey(specs[job].output_asset), metadata=metadata))
    sender = sender_for(environment.settings.webhook)
    for job, decision in sorted(decisions.items()):
        decision = _guarded(context, layout, decision, policies[job], targets, cursor, now)
        spec = specs[job]
        if decision.action in ("remediate", "restart", "escalate"):
            requests.append(_request(sensor, decision, spec, targets))
            if decision.action != "escalate":
                cursor.mark_acted(job, decision.key)
                events.append(_observation(sensor, decision, spec, requests[-1].run_key))
                _alert(sender, sensor, decision)
            context.log.info(f"{sensor}: {job}: {decision.action}: {decision.reason}")
        elif decision.action == "alert":
            if not cursor.has_alerted(job, decision.key):
                cursor.mark_alerted(job, decision.key)
                events.append(_observation(sensor, decision, spec, None))
                _alert(sender, sensor, decision)
            reasons.append(f"{job}: alert only ({decision.rule}): {decision.reason}")
        else:
            reasons.append(decision.reason)
    if requests:
        for reason in reasons:
            context.log.info(f"{sensor}: {reason}")
        return SensorResult(run_requests=requests, asset_events=events, cursor=cursor.dumps())
    return SensorResult(skip_reason=" | ".join(reasons) or f"{sensor}: no jobs configured", asset_events=events,
                        cursor=cursor.dumps())


def _guarded(context, layout: Layout, decision: Decision, policy: Policy, targets: Targets, cursor: Cursor,
             now: _dt.datetime) -> Decision:
    job = decision.job
    if decision.action not in ("remediate", "restart", "escalate"):
        return decision
    try:
        lock = maintenance.current(layout, job)
    except StateOpsError as err:
        return decision.skipped(f"{job}: {first_line(err)}")
    lock_row = None if lock is None else {"runbook_id": lock.runbook_id, "actor": lock.actor, "since": lock.since,
                                          "reason": lock.reason}
    if decision.action == "escalate":
        return guard_escalation(decision, policy, runs.deep_audits(context.instance, targets.deep_audit(job)),
                                lock=lock_row, now=now)
    if decision.action == "remediate" and targets.runbook is None:
        return decision.skipped(f"{job}: the {RUNBOOK_JOB} job is not in this code location")
    return guard(decision, policy, runs.remediations(context.instance, job, now, policy.cooldown_seconds),
                 lock=lock_row, handled=cursor.has_acted(job, decision.key), now=now)


def _request(sensor: str, decision: Decision, spec: JobSpec, targets: Targets) -> RunRequest:
    """One run per decision key: the run key makes the daemon drop a repeat, the tags link back."""
    tags = decision.tags(sensor)
    run_key = f"{sensor}:{decision.job}:{decision.action}:{decision.key}"
    if decision.action == "escalate":
        return RunRequest(run_key=run_key, job_name=targets.deep_audit(spec.name), tags=tags)
    if decision.action == "restart":
        config = {"ops": {spec.output_asset: {"config": dict(decision.run_config)}}} if decision.run_config else {}
        return RunRequest(run_key=run_key, job_name=targets.job_run(spec.name), run_config=config, tags=tags)
    return RunRequest(run_key=run_key, job_name=RUNBOOK_JOB, run_config=runbook_run_config(targets.runbook,
                                                                                         decision.runbook), tags=tags)


def _observation(sensor: str, decision: Decision, spec: JobSpec, run_key: str | None) -> AssetObservation:
    """The job's asset shows the latest remediation (or alert) and what it answered."""
    finding = decision.finding or {}
    metadata = {
        "remediation/action": decision.action, "remediation/sensor": sensor, "remediation/rule": decision.rule,
        "remediation/reason": decision.reason, "remediation/key": decision.key, "remediation/run_key": run_key,
        "remediation/finding_code": finding.get("code"), "remediation/audit_id": finding.get("audit_id"),
        "remediation/recommendation": finding.get("recommendation"),
    }
    if decision.runbook is not None:
        metadata["remediation/runbook"] = MetadataValue.json(dict(decision.runbook))
    if decision.run_config is not None:
        metadata["remediation/run_config"] = MetadataValue.json(dict(decision.run_config))
    return AssetObservation(asset_key=AssetKey(spec.output_asset),
                            metadata={k: v for k, v in metadata.items() if v is not None})


def _alert(sender, sensor: str, decision: Decision) -> None:
    if sender is None:
        return
    finding = decision.finding or {}
    title = f"{decision.job}: {decision.action} ({decision.rule})"
    fields = {"job": decision.job, "sensor": sensor, "rule": decision.rule, "finding": finding.get("code"),
              "audit": finding.get("audit_id"),
              "runbook": json.dumps(dict(decision.runbook)) if decision.runbook is not None else None}
    sender.send(Alert(title, decision.reason, finding.get("severity") or "warn", fields))
