"""Remediation decisions as pure logic: policy validation, the rules per finding, escalation, and the guards
(maintenance lock, acted on, in flight, cooldown, daily budget). Rows are shaped as the ops tables hold them;
the sensor tests (tests/spark/test_sensors.py) run the same rules over tables written by real audits."""
import datetime as dt

import pytest

from stateops.audit import Thresholds
from stateops.errors import ConfigError
from stateops.hashing import spark_partition
from stateops.remediation.growth import decide_growth
from stateops.remediation.guards import Cursor, Launched, guard, guard_escalation
from stateops.remediation.health import decide_health
from stateops.remediation.model import Decision, more_partitions, tightened
from stateops.remediation.policy import Policy
from stateops.remediation.signals import Trail
from stateops.remediation.skew import decide_skew

from tests.support.fake_checkpoint import HDFS, ROCKSDB, FakeCheckpoint

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
JOB = "user_activity"


def _at(minutes: float) -> dt.datetime:
    return NOW - dt.timedelta(minutes=minutes)


def _trail(*audits) -> Trail:
    """audits: (audit id, minutes ago, watermark minutes ago, rows, [findings])."""
    trail = Trail()
    for audit_id, ago, watermark_ago, rows, findings in audits:
        trail.audits.append({"audit_id": audit_id, "audited_at": _at(ago), "batch_id": 10 - ago,
                             "watermark": _at(watermark_ago), "rows_total": rows, "partitions": {(0, "default"): 4}})
        trail.findings[audit_id] = [{"audit_id": audit_id, "operator_id": 0, "store_name": "default",
                                     "message": "m", "recommendation": "fix it", **f} for f in findings]
    return trail


def _skew(cause: str, severity: str = "error", **details) -> dict:
    return {"code": "STATE_SKEW", "severity": severity,
            "details": {"cause": cause, "ratio": 3.6, "partitions": 4, "hot_partition": 0, **details}}


# --- policy --------------------------------------------------------------------------------------------------

def test_policy_defaults_global_and_per_job_values():
    config = {"remediation": {"mode": "auto", "daily_budget": 5, "jobs": {JOB: {"mode": "plan", "skew_audits": 3}}}}
    assert Policy.from_config({}, JOB) == Policy()
    assert Policy().mode == "plan"
    mine = Policy.from_config(config, JOB)
    assert (mine.mode, mine.daily_budget, mine.skew_audits) == ("plan", 5, 3)
    assert Policy.from_config(config, "user_sessions").mode == "auto"


@pytest.mark.parametrize("values, field, fix", [
    ({"mode": "yolo"}, "remediation.mode", "'plan', 'auto'"),
    ({"daily_budget": "3"}, "remediation.daily_budget", "plain number"),
    ({"daily_budget": True}, "remediation.daily_budget", "plain number"),
    ({"skew_audits": 0}, "remediation.skew_audits", "1 or more"),
    ({"watermark_factor": 1.5}, "remediation.watermark_factor", "between 0 and 1"),
    ({"partitions_factor": 1}, "remediation.partitions_factor", "above 1"),
    ({"cooldown": 60}, "remediation.cooldown", "cooldown_seconds"),
    ({"restart_failed": "yes"}, "remediation.restart_failed", "true or false"),
    ({"skew_action": "adjust"}, "remediation.skew_action", "'repartition', 'rebuild', 'alert'"),
])
def test_policy_refuses_bad_values_naming_field_and_fix(values, field, fix):
    with pytest.raises(ConfigError) as err:
        Policy.from_config({"remediation": values}, JOB)
    assert err.value.field == field and fix in err.value.fix, str(err.value)
    with pytest.raises(ConfigError) as err:
        Policy.from_config({"remediation": {"jobs": {JOB: values}}}, JOB)
    assert err.value.field == field.replace("remediation.", f"remediation.jobs.{JOB}.")


def test_more_partitions_are_coprime_and_capped():
    # Ids that collide on partition 0 of 4 land on 2 of 8 partitions, but spread over all 9.
    ids = [f"k{i}" for i in range(20000) if spark_partition(f"k{i}", 4) == 0][:2000]
    assert {spark_partition(i, 8) for i in ids} == {0, 4}
    assert {spark_partition(i, 9) for i in ids} == set(range(9))
    assert more_partitions(4, 2.0, 200) == 9 and more_partitions(9, 2.0, 200) == 19
    assert more_partitions(4, 2.0, 6) == 6 and more_partitions(6, 2.0, 6) is None


def test_tightened_watermark_never_below_the_minimum():
    assert tightened("2 hours", "5 minutes", 0.5) == "60 minutes"
    assert tightened("7 minutes", "5 minutes", 0.5) == "5 minutes"
    assert tightened("5 minutes", "5 minutes", 0.5) is None
    assert tightened("90 seconds", "1 minute", 0.9) == "81 seconds"


# --- skew ----------------------------------------------------------------------------------------------------

def test_skew_many_keys_needs_m_consecutive_audits_then_launches_the_runbook():
    policy = Policy(skew_audits=2)
    one = _trail(("a1", 60, 70, 5000, []), ("a2", 5, 15, 5000, [_skew("many_keys")]))
    first = decide_skew(JOB, one, policy, None)
    assert first.action == "escalate" and "on 1 of 2 consecutive deep audits" in first.reason
    two = _trail(("a1", 60, 70, 5000, [_skew("many_keys")]), ("a2", 5, 15, 5000, [_skew("many_keys")]))
    decision = decide_skew(JOB, two, policy, None)
    assert decision.action == "remediate" and decision.key == "a2:STATE_SKEW:0:default"
    assert decision.runbook == {"job": JOB, "mode": "repartition", "watermark_delay": None, "shuffle_partitions": 9,
                                "to_batch": None, "archive_id": None, "to_store": None,
                                "reason": decision.runbook["reason"],
                                "confirm": None, "dry_run": True}
    assert "audit a2" in decision.runbook["reason"] and decision.rule in decision.runbook["reason"]
    auto = decide_skew(JOB, two, Policy(mode="auto", skew_action="rebuild"), None)
    assert (auto.runbook["mode"], auto.runbook["dry_run"], auto.runbook["confirm"]) == ("rebuild", False, JOB)
    tags = auto.tags("state_skew_sensor")
    assert tags["stateops/audit_id"] == "a2" and tags["stateops/rule"] == auto.rule
    assert tags["stateops/finding_code"] == "STATE_SKEW" and tags["stateops/key"] == auto.key


def test_skew_streak_breaks_on_a_clean_audit_and_warn_is_below_an_error_policy():
    broken = _trail(("a1", 90, 95, 5000, [_skew("many_keys")]), ("a2", 60, 70, 5000, []),
                    ("a3", 5, 15, 5000, [_skew("many_keys")]))
    assert decide_skew(JOB, broken, Policy(skew_audits=2), None).action == "escalate"
    warn = _trail(("a1", 60, 70, 5000, [_skew("many_keys", "warn")]), ("a2", 5, 15, 5000, [_skew("many_keys", "warn")]))
    assert decide_skew(JOB, warn, Policy(), None).action == "remediate"
    assert decide_skew(JOB, warn, Policy(min_severity="error"), None).action == "skip"


def test_skew_from_one_hot_key_alerts_naming_the_key():
    trail = _trail(("a1", 60, 70, 5000, [_skew("hot_key", hot_key="u0000", hot_key_share=0.93)]),
                   ("a2", 5, 15, 5000, [_skew("hot_key", hot_key="u0000", hot_key_share=0.93)]))
    decision = decide_skew(JOB, trail, Policy(mode="auto"), None)
    assert decision.action == "alert" and decision.runbook is None
    assert '"u0000"' in decision.reason and "salt" in decision.reason and "93%" in decision.reason


def test_few_keys_and_clean_audits_are_skips_with_reasons():
    trail = _trail(("a1", 5, 15, 5000, [_skew("few_keys", "info")]))
    decision = decide_skew(JOB, trail, Policy(), None)
    assert decision.action == "skip" and "no skew to act on" in decision.reason and "a1" in decision.reason
    assert "no deep audit of this query yet" in decide_skew(JOB, Trail(), Policy(), None).reason


# --- growth --------------------------------------------------------------------------------------------------

def _growth(severity="error") -> dict:
    return {"code": "STATE_GROWTH", "severity": severity,
            "details": {"kind": "deep", "rows": {"ratio": 3.2, "from": 1000, "to": 3200,
                                                 "baseline_audited_at": _at(60).isoformat(timespec="seconds")}}}


def _decide_growth(trail, policy=Policy(), progress=(), delay="2 hours"):
    return decide_growth(JOB, trail, policy, Thresholds(growth_min_rows=100), list(progress), watermark_delay=delay,
                         watermark_min="5 minutes")


def test_growth_while_the_watermark_advances_tightens_the_delay():
    trail = _trail(("a1", 60, 70, 1000, []), ("a2", 5, 15, 3200, [_growth()]))
    decision = _decide_growth(trail)
    assert decision.action == "remediate" and decision.runbook["mode"] == "adjust"
    assert decision.runbook["watermark_delay"] == "60 minutes" and "2 hours -> 60 minutes" in decision.rule
    rebuild = _decide_growth(trail, Policy(growth_action="rebuild"))
    assert (rebuild.runbook["mode"], rebuild.runbook["watermark_delay"]) == ("rebuild", "60 minutes")
    at_min = _decide_growth(trail, delay="5 minutes")
    assert at_min.action == "alert" and "already at the job's watermark_min" in at_min.reason


def test_growth_with_a_standing_watermark_or_a_code_problem_only_alerts():
    standing = _trail(("a1", 60, 70, 1000, []), ("a2", 5, 70, 3200, [_growth()]))
    decision = _decide_growth(standing)
    assert decision.action == "alert" and "watermark did not advance" in decision.reason
    dedup = {"code": "UNBOUNDED_DEDUP", "severity": "error", "details": {},
             "recommendation": "Use dropDuplicatesWithinWatermark([event_id])"}
    trail = _trail(("a1", 60, 70, 1000, []), ("a2", 5, 15, 3200, [_growth(), dedup]))
    decision = _decide_growth(trail)
    assert decision.action == "alert" and decision.rule == "growth.unbounded_dedup -> alert (code fix)"
    assert "dropDuplicatesWithinWatermark" in decision.reason and decision.key == "a2:UNBOUNDED_DEDUP:0:default"


def test_rows_above_the_budget_and_progress_growth():
    over = _decide_growth(_trail(("a1", 5, 15, 9000, [])), Policy(state_rows_budget=5000))
    assert over.action == "remediate" and over.key == "a1:ROWS_BUDGET:None:None" and "9000 state rows" in over.reason

    def row(batch, rows, watermark_ago):
        return {"query_id": "q", "batch_id": batch, "state_rows_total": rows, "watermark": _at(watermark_ago),
                "timestamp": _at(30 - batch)}
    growing = _decide_growth(Trail(), progress=[row(1, 1000, 60), row(5, 2000, 40)])
    assert growing.action == "escalate" and "grew 2.00x" in growing.reason and growing.key == "progress:q:5"
    standing = _decide_growth(Trail(), progress=[row(1, 1000, 60), row(5, 2000, 60)])
    assert standing.action == "skip" and "1000 -> 2000 state rows" in standing.reason


# --- health --------------------------------------------------------------------------------------------------

def _status(state, **lease):
    base = {"lease_id": "L1", "run_id": "r1", "started": _at(120).isoformat(), "stale_reason": None}
    return {"state": state, "lease": {**base, **lease} if state != "idle" else None}


def _health(status, batch_ago=None, last_run=None, newest_ago=None, listed=True, policy=Policy(), lags=(),
            refusal=None):
    batch = {"batch_id": 7, "timestamp": _at(batch_ago)} if batch_ago is not None else None
    newest = _at(newest_ago) if newest_ago is not None else None
    return decide_health(JOB, status, batch, last_run, newest, policy, listed=listed,
                         now=NOW, kafka_lags=lags, refusal=refusal)


def test_health_stalled_stale_failed_and_healthy():
    stalled = _health(_status("running"), batch_ago=30, newest_ago=20, policy=Policy(progress_timeout_seconds=600))
    assert stalled.action == "remediate" and stalled.runbook["mode"] == "restart"  # the settings in force
    assert stalled.runbook["watermark_delay"] is None and stalled.key == "stalled:L1:7"
    idle_input = _health(_status("running"), batch_ago=30, newest_ago=40, policy=Policy(progress_timeout_seconds=600))
    assert idle_input.action == "skip" and "running" in idle_input.reason  # no input since: quiet, not stalled
    kafka = _health(_status("running"), batch_ago=30, listed=False, policy=Policy(progress_timeout_seconds=600))
    assert kafka.action == "remediate"
    stale = _health(_status("stale", stale_reason="pid 4 is no longer running", mode="continuous"), batch_ago=5)
    assert stale.action == "restart" and stale.run_config == {"mode": "continuous"} and stale.key == "stale:L1"
    failed = _health(_status("idle"), last_run={"run_id": "r9", "status": "FAILURE", "ended_at": _at(3)})
    assert failed.action == "restart" and failed.key == "failed:r9"
    off = _health(_status("idle"), last_run={"run_id": "r9", "status": "FAILURE", "ended_at": _at(3)},
                  policy=Policy(restart_failed=False))
    assert off.action == "skip" and "restart_failed is off" in off.reason
    ok = _health(_status("idle"), batch_ago=3, last_run={"run_id": "r8", "status": "SUCCESS", "ended_at": _at(3)})
    assert ok.action == "skip" and "last run r8 success" in ok.reason


def test_health_alerts_instead_of_restarting_a_run_refused_by_its_state_check():
    """A run refused because its query no longer fits the checkpoint's state would be refused again: alert once,
    naming the rebuild; a refusal of an earlier run does not stop the restart of a later failure."""
    fix = f"stateops recover run {JOB} --mode rebuild --confirm {JOB}"
    refusal = {"dagster_run_id": "r9", "details": {"operator": "operator 1 (dedupeWithinWatermark)",
                                                   "change": "key struct<a:string> -> struct<a:string,b:string>",
                                                   "fix": fix}}
    failed = {"run_id": "r9", "status": "FAILURE", "ended_at": _at(3)}
    alert = _health(_status("idle"), last_run=failed, refusal=refusal)
    assert alert.action == "alert" and alert.key == "incompatible:r9"
    assert alert.rule == "health.state_incompatible -> alert"
    assert alert.reason.startswith("STATE_INCOMPATIBLE: run r9") and "dedupeWithinWatermark" in alert.reason
    assert alert.reason.endswith(f"Fix: {fix}")
    later = _health(_status("idle"), last_run={**failed, "run_id": "r10"}, refusal=refusal)
    assert later.action == "restart" and later.key == "failed:r10"


def test_health_on_kafka_lag_growing_alerts_stalled_restarts_caught_up_rests():
    """Kafka: a lag grown over kafka_lag_batches (3) batches to at least 10,000 records alerts once per batch;
    records waiting with no batch for the timeout is a stall; a lag of 0 on a quiet topic is health."""
    quick = Policy(progress_timeout_seconds=600)
    growing = _health(_status("running"), batch_ago=1, listed=False, policy=quick, lags=[5_000, 9_000, 12_000, 15_000])
    assert growing.action == "alert" and growing.rule == "health.kafka_lag -> alert"
    assert "15,000 records behind" in growing.reason and "9,000 -> 12,000 -> 15,000" in growing.reason
    assert growing.key == "kafka_lag:L1:7"
    for lags in ([5_000, 9_000, 12_000, 11_000], [1, 2, 3, 4], [9_000, 12_000, 15_000]):  # fell, small, too few
        assert _health(_status("running"), batch_ago=1, listed=False, policy=quick, lags=lags).action == "skip"
    stalled = _health(_status("running"), batch_ago=30, listed=False, policy=quick, lags=[0, 40])
    assert stalled.action == "remediate" and "40 Kafka records waiting" in stalled.reason
    quiet = _health(_status("running"), batch_ago=30, listed=False, policy=quick, lags=[12, 0])
    assert quiet.action == "skip"


# --- guards --------------------------------------------------------------------------------------------------

def _remediation(key="a2:STATE_SKEW:0:default") -> Decision:
    return Decision(JOB, "remediate", "skew", key=key, rule="skew.many_keys -> repartition",
                    runbook={"mode": "repartition", "dry_run": True})


def _run(run_id, minutes_ago, finished=True, key="older") -> Launched:
    return Launched(run_id, _at(minutes_ago), finished, key)


def test_guards_in_order_lock_acted_on_in_flight_cooldown_budget():
    policy = Policy(cooldown_seconds=3600, daily_budget=2)
    lock = {"runbook_id": "rb-7", "actor": "alice", "since": "t", "reason": "resize"}
    assert "runbook rb-7 (alice" in guard(_remediation(), policy, [], lock=lock, handled=False, now=NOW).reason
    held = guard(_remediation(), policy, [], lock=None, handled=True, now=NOW)
    assert held.action == "skip" and "already acted on" in held.reason and "would remediate" in held.reason
    same = guard(_remediation(), policy, [_run("r1", 600, key="a2:STATE_SKEW:0:default")], lock=None, handled=False,
                 now=NOW)
    assert "already acted on by run r1" in same.reason
    flying = guard(_remediation(), policy, [_run("r1", 600, finished=False)], lock=None, handled=False, now=NOW)
    assert "run r1 is still in flight" in flying.reason
    cooling = guard(_remediation(), policy, [_run("r1", 30)], lock=None, handled=False, now=NOW)
    assert "cooldown after run r1" in cooling.reason
    spent = guard(_remediation(), policy, [_run("r1", 300), _run("r2", 120)], lock=None, handled=False, now=NOW)
    assert "daily budget used: 2 of 2" in spent.reason
    ok = guard(_remediation(), policy, [_run("r1", 25 * 60)], lock=None, handled=False, now=NOW)
    assert ok.action == "remediate"
    alert = Decision(JOB, "alert", "hot key", key="k")
    assert guard(alert, policy, [], lock=lock, handled=False, now=NOW) is alert


def test_escalation_waits_for_a_deep_audit_in_flight_and_the_interval():
    escalate = Decision(JOB, "escalate", "fast skew", key="fast:q:3")
    policy = Policy(escalate_interval_seconds=900)
    assert "in flight" in guard_escalation(escalate, policy, [_run("d1", 1, finished=False)], lock=None, now=NOW).reason
    assert "launched 5 min 0 s ago" in guard_escalation(escalate, policy, [_run("d1", 5)], lock=None, now=NOW).reason
    assert guard_escalation(escalate, policy, [_run("d1", 20)], lock=None, now=NOW) is escalate


def test_cursor_round_trip_bounded_and_tolerant():
    cursor = Cursor()
    for i in range(60):
        cursor.mark_acted(JOB, f"k{i}")
    cursor.mark_alerted(JOB, "hot")
    again = Cursor.parse(cursor.dumps())
    assert again.has_acted(JOB, "k59") and not again.has_acted(JOB, "k0") and len(again.acted[JOB]) == 50
    assert again.has_alerted(JOB, "hot") and not again.has_alerted("user_sessions", "hot")
    assert Cursor.parse("{not json") == Cursor() and Cursor.parse(None) == Cursor()


def test_a_tick_reads_only_the_audits_its_decisions_need():
    """The newest `audits` deep audits of each query and every one within `seconds` of its newest: a skew
    streak and a growth window; months of older audits stay out of the tick."""
    import pyarrow as pa

    from stateops.remediation.signals import Span, recent_audits

    now = dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc)
    rows = [{"query_id": q, "audit_id": f"{q}-{h}", "audited_at": now - dt.timedelta(hours=h), "store_name": s}
            for q, hours in (("a", range(0, 48, 4)), ("b", (100, 200, 300))) for h in hours for s in ("left", "right")]
    table = pa.Table.from_pylist(rows)
    kept = recent_audits(table, Span(audits=2, seconds=12 * 3600))
    ids = sorted(set(kept["audit_id"].to_pylist()))
    assert ids == ["a-0", "a-12", "a-4", "a-8", "b-100", "b-200"]  # a: within 12 h of its newest; b: newest 2
    assert kept.num_rows == 2 * len(ids)  # every store row of a kept audit
    assert recent_audits(table.slice(0, 0), Span(audits=2, seconds=0)).num_rows == 0


@pytest.mark.parametrize("provider, action", [(HDFS, "alert"), (ROCKSDB, "remediate")])
def test_a_repartition_the_runbook_would_refuse_is_an_alert_naming_why(tmp_path, monkeypatch, provider, action):
    """The skew sensor's many_keys repartition on a store Spark's offline repartition cannot rewrite (the in-memory
    store): an alert with the runbook's one-line refusal and its fix, not a run that fails."""
    from stateops.layout import Layout
    from stateops.remediation import tick

    layout = Layout(str(tmp_path / "home"))
    checkpoint = FakeCheckpoint(layout.checkpoint(JOB), provider=provider).batches(range(3))
    checkpoint.store(0, partitions=2, changelog=range(1, 4))
    two = _trail(("a1", 60, 70, 5000, [_skew("many_keys")]), ("a2", 5, 15, 5000, [_skew("many_keys")]))
    monkeypatch.setattr(tick, "_trails", lambda layout, queries, watched: {JOB: two})
    watched = tick.Watched(JOB, checkpoint.path, Policy(skew_audits=2), Thresholds(), "10 minutes", "1 minute")
    decision = tick.skew_decisions(layout, [watched], _at(0))[JOB]
    assert decision.action == action, decision.reason
    if action == "alert":
        assert "the runbook would refuse it" in decision.reason and "--mode rebuild --partitions N" in decision.reason
        assert decision.runbook is None and decision.rule.endswith("(refused) -> alert")


def test_the_in_memory_stores_heap_comes_before_any_growth_rule_warn_alerts_error_switches():
    """STATE_MEMORY (Spark's in-memory store near the heap the settings give it) comes first: a warning alerts with
    the finding's fix; an error launches the switch-store runbook to RocksDB (no input replayed), once per finding,
    or only alerts when the policy's memory_action says so."""
    memory = {"code": "STATE_MEMORY", "severity": "error", "operator_id": None, "store_name": None,
              "message": "Spark's in-memory store holds 1.2 GiB of state in executor heap",
              "recommendation": "Move the state to RocksDB: stateops recover run user_activity --mode switch-store",
              "details": {}}
    decision = _decide_growth(_trail(("a1", 5, 15, 9000, [_growth(), memory])), Policy(state_rows_budget=5000))
    assert decision.action == "remediate" and decision.rule == "growth.state_memory -> switch-store (rocksdb)"
    assert decision.key == "a1:STATE_MEMORY:None:None"
    assert decision.runbook["mode"] == "switch-store" and decision.runbook["to_store"] == "rocksdb"
    assert decision.runbook["dry_run"] is True and decision.runbook["confirm"] is None  # plan mode: a person acts
    acting = _decide_growth(_trail(("a1", 5, 15, 9000, [memory])), Policy(mode="auto"))
    assert acting.runbook["confirm"] == JOB and acting.runbook["dry_run"] is False
    alert = _decide_growth(_trail(("a1", 5, 15, 9000, [memory])), Policy(memory_action="alert"))
    assert alert.action == "alert" and alert.rule == "growth.state_memory -> alert" and "switch-store" in alert.reason
    warn = dict(memory, severity="warn")
    assert _decide_growth(_trail(("a1", 5, 15, 10, [warn])), Policy()).action == "alert"
    assert _decide_growth(_trail(("a1", 5, 15, 10, [warn])), Policy(min_severity="error")).action != "alert"
    in_rocksdb = dict(memory, details={"store": "rocksdb", "bytes": 5 * 2**30})  # no runbook bounds RocksDB's memory
    kept = _decide_growth(_trail(("a1", 5, 15, 9000, [in_rocksdb])), Policy(mode="auto"))
    assert kept.action == "alert" and kept.runbook is None and kept.rule == "growth.state_memory -> alert"