"""Query health: a query whose progress stopped while its lease is held, a lease gone stale, or a last run
that failed; each gets a restart.

    stalled   live lease, no batch for progress_timeout_seconds although input arrived after the last batch
              (or, for sources without a listing, no batch at all for that long): the runbook in `restart` mode
              (a guarded restart with the settings in force: stop, with termination as the last resort; archive;
              restart; verify), dry run or not by the policy's mode
    stale     the lease's holder died: an ordinary run of the job takes the stale lease over
    failed    the job's last run failed and nothing holds the lease: an ordinary run (restart_failed); but a run
              refused because the query no longer fits its checkpoint's state (the run journaled
              `state_check`/`refused`: stateops.jobs.runtime.compatibility) would be refused again: an alert
              naming the rebuild instead
    behind    (Kafka) a running query fell further behind its topics over kafka_lag_batches batches in a row
              (the KAFKA_LAG finding's rule, stateops.kafka_lag): an alert. For a Kafka source a lag above 0
              is the input that waits: with no batch for progress_timeout_seconds, the query is stalled.
"""
from __future__ import annotations

import datetime as _dt
from typing import Any, Mapping, Sequence

from stateops import kafka_lag
from stateops.audit.thresholds import Thresholds
from stateops.timefmt import human_duration
from stateops.remediation.model import Decision, age, runbook_config, when
from stateops.remediation.policy import Policy


def decide_health(job: str, status: Mapping[str, Any], latest_batch: Mapping[str, Any] | None,
                  last_run: Mapping[str, Any] | None, newest_input: _dt.datetime | None, policy: Policy, *,
                  listed: bool, now: _dt.datetime, kafka_lags: Sequence[int] = (),
                  thresholds: Thresholds | None = None, refusal: Mapping[str, Any] | None = None) -> Decision:
    """`status`: stateops.control.job_status; `latest_batch`: the job's newest progress row; `last_run`: the
    job's last finished Dagster run ({run_id, status, ended_at}); `listed`: whether `newest_input` comes from
    a file listing (JSON sources) or is unknown (Kafka); `kafka_lags`: the total lag of the stateful query's
    newest batches, oldest first (Kafka sources); `refusal`: the job's newest `state_check` row of the `actions`
    table."""
    t = thresholds or Thresholds()
    lease = status.get("lease")
    batch_at = latest_batch["timestamp"] if latest_batch else None
    batch = (f"last batch {latest_batch['batch_id']} at {when(batch_at)}" if latest_batch else "no batch recorded")
    if status["state"] == "stale":
        return Decision(job, "restart", f"lease of run {lease['run_id']} is stale ({lease['stale_reason']}); {batch}: "
                        "a new run takes it over", key=f"stale:{lease['lease_id']}", rule="health.stale_lease -> restart",
                        run_config=_run_config(lease))
    if status["state"] == "running":
        started = _dt.datetime.fromisoformat(lease["started"])
        quiet = age(max(filter(None, (batch_at, started))), now)
        waiting = newest_input is not None and (batch_at is None or newest_input > batch_at)
        behind = bool(kafka_lags) and kafka_lags[-1] > 0  # Kafka: records wait after the last batch read
        if quiet > policy.progress_timeout_seconds and (waiting or behind or (not listed and not kafka_lags)):
            pending = (f"input waiting since {when(newest_input)}" if waiting else
                       f"{kafka_lags[-1]:,} Kafka records waiting" if behind else "input unknown (no listing)")
            reason = (f"sensor query_health_sensor, rule health.stalled -> restart (guarded, same settings): run "
                      f"{lease['run_id']} holds the lease, {batch}, {pending}")
            return Decision(job, "remediate", f"run {lease['run_id']} holds the lease but made no progress for "
                            f"{human_duration(quiet)} (progress_timeout_seconds {policy.progress_timeout_seconds}); "
                            f"{batch}; {pending}", key=f"stalled:{lease['lease_id']}:{latest_batch and latest_batch['batch_id']}",
                            rule="health.stalled -> restart (guarded, same settings)",
                            runbook=runbook_config(job, "restart", reason=reason, dry_run=policy.mode == "plan"))
        if kafka_lag.growing(kafka_lags, t.kafka_lag_batches, t.kafka_lag_min_offsets):
            recent = " -> ".join(f"{n:,}" for n in kafka_lags[-(t.kafka_lag_batches + 1):])
            return Decision(job, "alert", f"KAFKA_LAG: run {lease['run_id']} is {kafka_lags[-1]:,} records behind "
                            f"its Kafka topics, more after each of its last {t.kafka_lag_batches} batches ({recent}); "
                            f"{batch}: raise maxOffsetsPerTrigger or add cores (stateops jobs status {job})",
                            key=f"kafka_lag:{lease['lease_id']}:{latest_batch and latest_batch['batch_id']}",
                            rule="health.kafka_lag -> alert")
        return Decision(job, "skip", f"{job}: running (run {lease['run_id']}), {batch}")
    if last_run and last_run["status"] == "FAILURE":
        if refusal and refusal.get("dagster_run_id") == last_run["run_id"]:
            details = refusal.get("details", {})
            return Decision(job, "alert", f"STATE_INCOMPATIBLE: run {last_run['run_id']} was refused before its "
                            f"queries started: the query no longer fits its checkpoint's state ({details.get('operator')}: "
                            f"{details.get('change')}); a restart would be refused again. Fix: {details.get('fix')}",
                            key=f"incompatible:{last_run['run_id']}", rule="health.state_incompatible -> alert")
        if not policy.restart_failed:
            return Decision(job, "skip", f"{job}: last run {last_run['run_id']} failed; restart_failed is off")
        return Decision(job, "restart", f"last run {last_run['run_id']} failed at {when(last_run['ended_at'])}; {batch}",
                        key=f"failed:{last_run['run_id']}", rule="health.failed_run -> restart")
    last = f"last run {last_run['run_id']} {last_run['status'].lower()}" if last_run else "no finished run"
    return Decision(job, "skip", f"{job}: idle, {last}, {batch}")


def _run_config(lease: Mapping[str, Any]) -> dict[str, Any] | None:
    """A restart runs the way the dead run did: long-running when its lease says so."""
    return {"mode": "continuous"} if lease.get("mode") == "continuous" else None
