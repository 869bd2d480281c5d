"""One sensor tick's reading and deciding, per job, without Dagster and without a JVM.

The sensor (sensors/) resolves the jobs into `Watched` rows, calls one of the `*_decisions` functions, then
applies the guards with the runs it finds in the Dagster instance. An ops table that cannot be read raises
OpsTableError for the whole tick (every job reads it); a job without a checkpoint is a skip of its own.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from stateops import actions
from stateops.audit import Thresholds, fast_audit
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.errors import StateOpsError, first_line
from stateops.storage import exists
from stateops.layout import Layout
from stateops.recovery.model import RecoveryRefused
from stateops.recovery.preflight import check_store
from stateops.remediation.growth import decide_growth, window_start
from stateops.remediation.health import decide_health
from stateops.remediation.model import Decision
from stateops.remediation.policy import Policy
from stateops.remediation.signals import (Query, Span, Trail, deep_trails, latest_batches, newest_file,
                                          progress_ends, recent_kafka_lags)
from stateops.remediation.skew import decide_skew


@dataclass(frozen=True)
class Watched:
    """A job as a sensor sees it: where its state is, its settings in force and its policy."""

    job: str
    checkpoint: str
    policy: Policy
    thresholds: Thresholds
    watermark_delay: str  # in force (override, config or spec)
    watermark_min: str
    landing: tuple[str, ...] = ()  # input folders (JSON sources); empty for Kafka


def current_queries(watched: Iterable[Watched]) -> dict[str, Query]:
    """Job -> its current query, for the jobs with a committed batch."""
    return _queries(watched)[0]


def _queries(watched: Iterable[Watched]) -> tuple[dict[str, Query], dict[str, Decision]]:
    """Job -> its current query; jobs without a committed batch get a skip instead."""
    queries, skips = {}, {}
    for w in watched:
        if not exists(w.checkpoint):
            skips[w.job] = Decision(w.job, "skip", f"{w.job}: no checkpoint yet at {w.checkpoint} (the job has not run)")
            continue
        try:
            checkpoint = Checkpoint.open(w.checkpoint)
            if not checkpoint.committed_batches():
                raise StateOpsError(f"no committed batch yet at {w.checkpoint}")
            queries[w.job] = Query(w.job, w.checkpoint, checkpoint.query_id())
        except (StateOpsError, OSError, ValueError, KeyError) as err:
            skips[w.job] = Decision(w.job, "skip", f"{w.job}: no checkpoint to watch: {first_line(err)}")
    return queries, skips


def _trails(layout: Layout, queries: Mapping[str, Query], watched: Iterable[Watched]) -> dict[str, Trail]:
    """The deep audits the decisions read: a skew streak's audits and a growth window's, no older ones."""
    watched = list(watched)
    span = Span(audits=max((w.policy.skew_audits for w in watched), default=1),
                seconds=max((w.thresholds.growth_window_seconds for w in watched), default=0))
    trails = deep_trails(layout, queries.values(), span) if queries else {}
    return trails if trails is not None else {job: Trail() for job in queries}


def skew_decisions(layout: Layout, watched: Iterable[Watched], now: _dt.datetime) -> dict[str, Decision]:
    """Deep audits first; a job without actionable deep skew gets the fast audit in process (files and
    progress rows) for an escalation."""
    watched = {w.job: w for w in watched}
    queries, decisions = _queries(watched.values())
    trails = _trails(layout, queries, watched.values())
    for job, query in queries.items():
        w = watched[job]
        decision = decide_skew(job, trails[job], w.policy, None)
        if decision.action == "skip":  # no deep skew: look at the cheap numbers
            report = fast_audit(query.checkpoint, thresholds=w.thresholds, job=job, history=[], progress=[], now=now)
            decision = decide_skew(job, trails[job], w.policy, report)
        if decision.action == "remediate" and decision.runbook and w.policy.skew_action == "repartition":
            try:  # a store or format Spark's offline repartition cannot rewrite: say so instead of failing a run
                check_store(job, query.checkpoint, "repartition")
            except RecoveryRefused as refused:
                decision = decision.alerted(str(refused))
        decisions[job] = decision
    return decisions


def growth_decisions(layout: Layout, watched: Iterable[Watched], now: _dt.datetime) -> dict[str, Decision]:
    watched = {w.job: w for w in watched}
    queries, decisions = _queries(watched.values())
    trails = _trails(layout, queries, watched.values())
    progress = progress_ends(layout, {q.query_id: window_start(now, watched[job].thresholds)
                                      for job, q in queries.items()}) or {}
    for job, query in queries.items():
        w = watched[job]
        decisions[job] = decide_growth(job, trails[job], w.policy, w.thresholds, progress.get(query.query_id, []),
                                       watermark_delay=w.watermark_delay, watermark_min=w.watermark_min)
    return decisions


def health_decisions(layout: Layout, watched: Iterable[Watched], statuses: Mapping[str, Mapping[str, Any]],
                     last_runs: Mapping[str, Mapping[str, Any] | None], now: _dt.datetime,
                     batches: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Decision]:
    """`statuses`: job -> stateops.control.job_status; `last_runs`: job -> its last finished Dagster run;
    `batches`: job -> its newest progress row, when the caller read them (signals.latest_batches)."""
    watched = list(watched)
    batches = batches if batches is not None else latest_batches(layout) or {}
    window = max((w.thresholds.kafka_lag_batches for w in watched), default=0) + 1
    lags = recent_kafka_lags(layout, window) if any(not w.landing for w in watched) else {}
    refusals = {row["job"]: row for row in actions.read(layout, action=actions.STATE_CHECK)}  # oldest first: newest kept
    decisions = {}
    for w in watched:
        decisions[w.job] = decide_health(
            w.job, statuses[w.job], batches.get(w.job), last_runs.get(w.job),
            newest_file(w.landing) if w.landing else None, w.policy,
            listed=bool(w.landing), now=now, kafka_lags=lags.get(w.job, ()), thresholds=w.thresholds,
            refusal=refusals.get(w.job))
    return decisions
