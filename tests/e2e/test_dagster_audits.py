"""State audits through Dagster on real checkpoints: real Spark, real Delta, real Dagster runs, no mocks.

user_activity runs on generated input; its deep and fast audits run as the Dagster audit jobs. Oracles:
Spark's own state reader counted directly (rows per partition), the recorded `findings` rows, and the
skew rule re-stated on the oracle counts with the thresholds from the test's STATEOPS_CONFIG.

A hot *user* does not skew user_activity's state (one row per window and user, one per event id), so
the skewed input is a hot *partition*: the generator's events with event ids re-keyed onto ids that
Spark's hash partitioning sends to one partition of the dedup store (what a hot key does to a dedup
or join store).
"""
import io
import json
import os

import pytest
from PIL import Image
from dagster import (AssetCheckSeverity, Definitions, RunRequest, SkipReason, build_schedule_context,
                     in_process_executor, instance_for_test)
from pyspark.sql import functions as F

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.audit import Thresholds
from stateops.charts import PNG_SIZE
from stateops.delta import read_table
from stateops.layout import Layout

from stateops.dagster import build_defs
from stateops.dagster.resources import default_resources

pytestmark = pytest.mark.e2e

JOB = "user_activity"
PARTITIONS = 4
CONFIG_TOML = f"""
[jobs.{JOB}]
shuffle_partitions = {PARTITIONS}

[audit.jobs.{JOB}]
skew_min_rows = 50   # the default (1000) calls a few hundred rows noise; this data is small
"""


def _defs() -> Definitions:
    """The code location's definitions, built now (for the STATEOPS_CONFIG and STATEOPS_HOME set now)."""
    return Definitions.merge(build_defs(), Definitions(executor=in_process_executor))


def _config(tmp_path, monkeypatch):
    path = tmp_path / "stateops.toml"
    path.write_text(CONFIG_TOML)
    monkeypatch.setenv("STATEOPS_CONFIG", str(path))
    return path


def _use_home(monkeypatch, path) -> Layout:
    monkeypatch.setenv("STATEOPS_HOME", str(path))
    return Layout(str(path))


def _ids_on_partition(spark, partition: int, count: int) -> list[str]:
    """Ids that Spark's hash partitioning (pmod(murmur3(id), n)) sends to `partition`."""
    rows = (spark.range(count * PARTITIONS * 3).select(F.concat(F.lit("hot"), F.col("id").cast("string")).alias("i"))
            .where(F.pmod(F.hash("i"), F.lit(PARTITIONS)) == partition).limit(count).collect())
    return [r.i for r in rows]


def _rekey_onto_one_partition(spark, generated) -> None:
    """Every event keeps its user, time and value; its event id becomes one that hashes to partition 0."""
    paths = generated.files["events"]
    lines = sum(len(open(p).read().splitlines()) for p in paths)
    ids = iter(_ids_on_partition(spark, 0, lines))
    for path in paths:
        stat = os.stat(path)
        rows = [json.loads(line) for line in open(path).read().splitlines()]
        with open(path, "w") as handle:
            handle.writelines(json.dumps({**row, "event_id": next(ids)}) + "\n" for row in rows)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # Spark reads files in mtime order


def _oracle(spark, checkpoint: str, operator_id: int) -> dict[int, int]:
    """Rows per partition (every partition, empty ones as 0) from Spark's state reader, counted directly."""
    counted = (spark.read.format("statestore").option("path", checkpoint).option("operatorId", operator_id)
               .load().groupBy("partition_id").count().collect())
    return {p: 0 for p in range(PARTITIONS)} | {r.partition_id: r["count"] for r in counted}


def _expected_skew(per_partition: dict[int, int], t: Thresholds) -> str | None:
    """The skew rule re-stated for stores of far more keys than partitions (hashing noise is then far below
    the thresholds): max / mean against skew_ratio(_error), or the fullest partition's share against
    skew_share(_error); small stores ignored."""
    total = sum(per_partition.values())
    if total < t.skew_min_rows:
        return None
    top = max(per_partition.values())
    ratio, share = top * len(per_partition) / total, top / total
    if ratio >= t.skew_ratio_error or share >= t.skew_share_error:
        return "error"
    return "warn" if ratio >= t.skew_ratio or share >= t.skew_share else None


def _materialization(result, key: str) -> dict:
    (event,) = result.asset_materializations_for_node(key)
    return {k: v.value for k, v in event.metadata.items()}


def _checks(result) -> dict:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _audit_rows(layout: Layout, audit_id: str, table: str = "audits") -> list[dict]:
    rows = read_table(layout.ops_table(table), filters=[("audit_id", "=", audit_id)])
    return [] if rows is None else rows.to_pylist()


def _charts(meta: dict, layout: Layout) -> dict[str, bytes]:
    """The chart files an audit's metadata links, read from the audit's folder under the ops folder."""
    charts = {k.removeprefix("chart/"): v for k, v in meta.items() if k.startswith("chart/")}
    assert all(os.path.dirname(path) == layout.audit_charts(JOB, meta["audit_id"]) for path in charts.values())
    return {name: open(path, "rb").read() for name, path in charts.items()}


def _run_deep(defs: Definitions, instance):
    result = defs.resolve_job_def(f"{JOB}_deep_audit").execute_in_process(instance=instance)
    assert result.success
    return result


def test_deep_and_fast_audits_record_show_and_check_state(spark, tmp_path, monkeypatch, dagster_instance):
    _config(tmp_path, monkeypatch)
    thresholds = Thresholds.from_config({"audit": {"jobs": {JOB: {"skew_min_rows": 50}}}}, JOB)
    spec = get_job(JOB)
    assert spec.shuffle_partitions == PARTITIONS

    # --- a hot partition ------------------------------------------------------------------------------
    hot = _use_home(monkeypatch, tmp_path / "hot")
    generated = generate(hot, GeneratorConfig(events=800, files=4, users=100, hot_key_share=0.6,
                                              minutes_per_file=15, seed=31))
    _rekey_onto_one_partition(spark, generated)
    run_job(spark, spec, hot, settings=read_settings())
    checkpoint = spec.checkpoint_path(hot)
    defs = _defs()
    with instance_for_test() as instance:  # a committed batch now: the schedules launch runs
        with build_schedule_context(instance=instance, resources=default_resources()) as context:
            assert isinstance(defs.get_repository_def().get_schedule_def(f"{JOB}_deep_audit_hourly")(context),
                              RunRequest)

    result = _run_deep(defs, dagster_instance)
    meta = _materialization(result, f"{JOB}_state_audit")
    assert meta["audit_kind"] == "deep" and meta["checkpoint"] == checkpoint
    recorded = {row["operator_id"]: row for row in _audit_rows(hot, meta["audit_id"])}
    names = {op: row["operator_name"] for op, row in recorded.items()}
    assert sorted(names.values()) == ["dedupeWithinWatermark", "stateStoreSave"], names
    expected_skew = {}
    for op, row in recorded.items():
        direct = _oracle(spark, checkpoint, op)
        assert {int(p): n for p, n in json.loads(row["rows_per_partition_json"]).items()} == direct, names[op]
        assert row["rows_total"] == sum(direct.values())
        expected_skew[names[op]] = _expected_skew(direct, thresholds)
        # The operators table shows the same numbers.
        assert f"| {op} | {names[op]} | default |" in meta["operators"]
        assert f"| {sum(direct.values()):,} |" in meta["operators"]
    assert expected_skew == {"dedupeWithinWatermark": "error", "stateStoreSave": None}, expected_skew

    findings = _audit_rows(hot, meta["audit_id"], "findings")
    for severity in ("error", "warn", "info"):
        assert meta[f"findings/{severity}"] == sum(f["severity"] == severity for f in findings)
    skew = [f for f in findings if f["code"] == "STATE_SKEW"]
    assert [(f["operator_id"], f["severity"]) for f in skew] == [
        (op, "error") for op, name in names.items() if name == "dedupeWithinWatermark"]
    assert "| ERROR | STATE_SKEW |" in meta["findings"] and skew[0]["message"] in meta["findings"]
    details = json.loads(skew[0]["details_json"])  # the numbers a remediation policy reads
    direct = _oracle(spark, checkpoint, skew[0]["operator_id"])
    assert details["ratio"] == pytest.approx(max(direct.values()) * PARTITIONS / sum(direct.values()), abs=1e-3)
    assert (details["hot_partition"], details["cause"], details["partitions"]) == (0, "many_keys", PARTITIONS)
    images = _charts(meta, hot)
    assert set(images) == {"state_per_partition", "state_over_time"}
    assert all(Image.open(io.BytesIO(png)).size == PNG_SIZE for png in images.values())
    assert not any("data:image" in str(value) for value in meta.values()), "no image inside the event log"
    for op, row in recorded.items():  # one number per store, which Dagster plots over the audits
        assert meta[f"rows/op_{op}_{names[op]}/default"] == row["rows_total"]

    checks = _checks(result)
    assert set(checks) == {"state_skew", "state_growth", "state_eviction", "state_readable", "state_compatible"}
    assert checks["state_compatible"].passed and "fits the state" in checks["state_compatible"].description
    assert all(c.asset_key.to_user_string() == spec.sink_table for c in checks.values())
    assert not checks["state_skew"].passed and checks["state_skew"].severity == AssetCheckSeverity.ERROR
    skew_meta = {k: v.value for k, v in checks["state_skew"].metadata.items()}
    assert skew_meta["audit_id"] == meta["audit_id"] and skew_meta["audit_age_seconds"] >= 0
    assert [m["message"] for m in skew_meta["messages"]] == [skew[0]["message"]]
    assert skew[0]["recommendation"] in skew_meta["findings"]
    for name, codes in (("state_growth", {"STATE_GROWTH"}),
                        ("state_eviction", {"EVICTION_STALLED", "UNBOUNDED_DEDUP", "CLEANUP_STUCK"}),
                        ("state_readable", {"STATE_UNREADABLE"})):
        levels = {f["severity"] for f in findings if f["code"] in codes}
        worst = "error" if "error" in levels else "warn" if "warn" in levels else None
        assert checks[name].passed == (worst is None), name
        if worst:
            assert checks[name].severity.value.lower() == worst, name

    # --- the fast audit: no Spark resource in its job, bytes per partition, recorded as "fast" ----------
    fast_job = defs.resolve_job_def(f"{JOB}_fast_audit")
    assert "spark" not in fast_job.required_resource_keys
    fast = fast_job.execute_in_process(instance=dagster_instance)
    assert fast.success
    fast_meta = _materialization(fast, f"{JOB}_state_audit_fast")
    assert fast_meta["audit_kind"] == "fast"
    fast_rows = _audit_rows(hot, fast_meta["audit_id"])
    assert {r["operator_id"] for r in fast_rows} == set(recorded) and {r["kind"] for r in fast_rows} == {"fast"}
    assert set(_charts(fast_meta, hot)) == {"state_per_partition", "state_over_time"}
    assert "(bytes)" in fast_meta["operators"]

    # --- balanced: the same job on balanced input passes the skew check ------------------------------
    balanced = _use_home(monkeypatch, tmp_path / "balanced")
    generate(balanced, GeneratorConfig(events=800, files=4, users=100, hot_key_share=0.0, minutes_per_file=15,
                                       seed=31))
    run_job(spark, spec, balanced, settings=read_settings())
    result = _run_deep(_defs(), dagster_instance)
    meta = _materialization(result, f"{JOB}_state_audit")
    for row in _audit_rows(balanced, meta["audit_id"]):
        direct = _oracle(spark, spec.checkpoint_path(balanced), row["operator_id"])
        assert {int(p): n for p, n in json.loads(row["rows_per_partition_json"]).items()} == direct
        assert sum(direct.values()) >= thresholds.skew_min_rows  # big enough to be judged, and not skewed
        assert _expected_skew(direct, thresholds) is None
    checks = _checks(result)
    assert checks["state_skew"].passed, checks["state_skew"].description
    assert "STATE_SKEW" not in meta["finding_codes"]


def test_no_checkpoint_fails_in_one_line_and_schedules_skip(tmp_path, monkeypatch, dagster_instance):
    _config(tmp_path, monkeypatch)
    layout = _use_home(monkeypatch, tmp_path / "empty")
    defs = _defs()
    result = defs.resolve_job_def(f"{JOB}_deep_audit").execute_in_process(instance=dagster_instance,
                                                                       raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message.strip()
    assert f"job {JOB} has no checkpoint yet at {get_job(JOB).checkpoint_path(layout)}" in message
    assert "\n" not in message and "Traceback" not in message

    repo = defs.get_repository_def()
    with instance_for_test() as instance:
        with build_schedule_context(instance=instance, resources=default_resources()) as context:
            tick = repo.get_schedule_def(f"{JOB}_deep_audit_hourly")(context)
        assert isinstance(tick, SkipReason) and "no checkpoint yet" in tick.skip_message


def test_audit_definitions_shape(dagster_instance):
    """(A live instance while the repository loads: Dagster resolves the process's definitions-state storage
    through the newest instance, and an earlier test's has been disposed.)"""
    from dagster import AssetKey, DefaultScheduleStatus

    from tests.support.code_location import SPECS
    from stateops.dagster.audits.assets import GROUP
    from stateops.dagster.definitions import defs

    repo = defs.get_repository_def()
    graph = repo.asset_graph
    for spec in SPECS.values():
        for key in (f"{spec.name}_state_audit", f"{spec.name}_state_audit_fast"):
            node = graph.get(AssetKey(key))
            assert node.group_name == GROUP and AssetKey(spec.sink_table) in node.parent_keys
        checks = {k.name for k in graph.asset_check_keys if k.asset_key == AssetKey(spec.sink_table)}
        assert checks == {"state_skew", "state_growth", "state_eviction", "state_readable", "state_compatible"}
        schedule = repo.get_schedule_def(f"{spec.name}_deep_audit_hourly")
        assert schedule.cron_schedule == "0 * * * *" and schedule.default_status == DefaultScheduleStatus.STOPPED
        job = repo.get_job(schedule.job_name)
        assert [k.to_user_string() for k in job.asset_layer.selected_asset_keys] == [f"{spec.name}_state_audit"]
        # The fast audit runs on demand; the sensors compute it in process instead of a schedule every 5 min.
        assert not repo.has_schedule_def(f"{spec.name}_fast_audit_every_5_minutes")
        fast = repo.get_job(f"{spec.name}_fast_audit")
        assert [k.to_user_string() for k in fast.asset_layer.selected_asset_keys] == [f"{spec.name}_state_audit_fast"]
        assert "spark" not in fast.required_resource_keys
