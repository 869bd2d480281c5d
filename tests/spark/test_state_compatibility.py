"""A changed query is refused before its run starts when its checkpoint's state cannot take it, with nothing
written, and the rebuild the refusal names then gives the new query's output.

A user's job (a module of this test, registered by a config file) runs once; then its config names another
transformation, as a user editing the job would. Oracles: the checkpoint's files and the Delta table's version
before and after the refused run (nothing written), Spark's own schema check (the refusals it would raise at the
first batch) and the batch recomputation of the new query after the rebuild (tests/support/oracle.py).
"""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from stateops import actions
from stateops.cli.main import main
from stateops.jobs.demo.generator import generate
from stateops.layout import Layout
from tests.support import oracle
from tests.support.delta_rows import table_rows
from tests.support.scenarios import SMALL, more_input

pytestmark = pytest.mark.spark

JOB = "clicks"
REBUILD = f"stateops recover run {JOB} --mode rebuild --confirm {JOB}"
DELAY_MS = 10 * 60 * 1000

MODULE = '''
from pyspark.sql import functions as F


def _windows(events, key):
    return (events.groupBy(F.window("event_time", "5 minutes"), key)
            .agg(F.count(F.lit(1)).alias("events"), F.sum("value").alias("value_sum"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    F.col(key).alias("group_key"), "events", "value_sum"))


def by_user(events):
    return _windows(events.dropDuplicatesWithinWatermark(["event_id"]), "user_id")


def by_action(events):  # the aggregation key changed, to a column of the same type
    return _windows(events.dropDuplicatesWithinWatermark(["event_id"]), "action")


def dedup_two_columns(events):  # the dedup key changed
    return _windows(events.dropDuplicatesWithinWatermark(["event_id", "user_id"]), "user_id")


def no_dedup(events):  # a stateful operator removed
    return _windows(events, "user_id")


def more_aggregates(events):  # the aggregation's state value changed
    return (events.dropDuplicatesWithinWatermark(["event_id"])
            .groupBy(F.window("event_time", "5 minutes"), "user_id")
            .agg(F.count(F.lit(1)).alias("events"), F.sum("value").alias("value_sum"), F.max("value").alias("top"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    F.col("user_id").alias("group_key"), "events", "value_sum", "top"))


def _paid(orders, payments, condition):
    return orders.alias("o").join(payments.alias("p"), F.expr(
        condition + " AND p.payment_time >= o.order_time AND p.payment_time <= o.order_time + interval 5 minutes"
    )).select("o.order_id", "o.order_time", "o.amount", "p.payment_id", F.col("p.order_id").alias("paid_order_id"),
              F.col("p.amount").alias("paid"))


def paid(orders, payments):
    return _paid(orders, payments, "o.order_id = p.order_id")


def paid_same_amount(orders, payments):  # a join column added
    return _paid(orders, payments, "o.order_id = p.order_id AND o.amount = p.amount")


def paid_by_payment_id(orders, payments):  # a join column replaced by one of the same type
    return _paid(orders, payments, "o.order_id = p.payment_id")


def rounded_output(events):  # a change outside state: an output column computed differently
    return by_user(events).withColumn("value_sum", F.round("value_sum", 6))


def with_source(events):  # a change outside state: a new output column
    return by_user(events).withColumn("source", F.lit("landing"))


def _extremes(events, *aggregates):
    """(name, aggregate) pairs, output in their order (a final select in another order would be folded into the
    aggregate by Spark's optimizer, putting the state's fields back in the old order)."""
    return (events.groupBy(F.window("event_time", "5 minutes"), "user_id")
            .agg(F.count(F.lit(1)).alias("events"), *(column.alias(name) for name, column in aggregates))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    F.col("user_id").alias("group_key"), "events", *(name for name, _ in aggregates)))


def hi_lo(events):
    return _extremes(events, ("hi", F.max("value")), ("lo", F.min("value")))


def lo_hi(events):  # the two same-typed aggregates reordered: Spark's check passes, the old maxima read as minima
    return _extremes(events, ("lo", F.min("value")), ("hi", F.max("value")))


def hi_of_action(events):  # an aggregate over another column, of the same type
    return _extremes(events, ("hi", F.max(F.length("action").cast("double"))), ("lo", F.min("value")))


def hi_lo_flagged(events):  # a change outside state: a new output column after the same aggregates
    return hi_lo(events).withColumn("source", F.lit("landing"))
'''


CONFIG = """
[catalog]
builtin_jobs = false

[jobs.{job}]
transformation = "{module}:{transformation}"
watermark_delay = "10 minutes"
watermark_min = "5 minutes"
watermark_max = "2 hours"
"""
EVENTS = """output_mode = "update"
merge_keys = ["window_start", "window_end", "group_key"]
output_time_column = "window_start"

[[jobs.{job}.inputs]]
name = "events"
schema = "event_id STRING, user_id STRING, event_time TIMESTAMP, action STRING, value DOUBLE"
time_column = "event_time"
"""
ORDERS_PAYMENTS = """output_mode = "append"
idempotent_key = ["order_id", "payment_id"]
output_time_column = "order_time"
join = {{ left = "orders", right = "payments", lower = "0 seconds", upper = "5 minutes" }}

[[jobs.{job}.inputs]]
name = "orders"
schema = "order_id STRING, user_id STRING, order_time TIMESTAMP, amount DOUBLE"
time_column = "order_time"

[[jobs.{job}.inputs]]
name = "payments"
schema = "payment_id STRING, order_id STRING, payment_time TIMESTAMP, amount DOUBLE"
time_column = "payment_time"
"""


def _config(folder, transformation: str, job_lines: str = EVENTS, module: str = "changed_queries") -> str:
    path = folder / "clicks.toml"
    path.write_text((CONFIG + job_lines).format(job=JOB, transformation=transformation, module=module))
    return str(path)


def _cli(layout: Layout, config: str, *args: str):
    return CliRunner().invoke(main, ["--home", layout.home, "--config", config, *args])


def _tree(path: str) -> dict[str, tuple[int, int]]:
    """Every file under `path` with its size and modification time."""
    found = {}
    for folder, _, names in os.walk(path):
        for name in names:
            stat = os.stat(os.path.join(folder, name))
            found[os.path.relpath(os.path.join(folder, name), path)] = (stat.st_size, stat.st_mtime_ns)
    return found


def _clicks(store, tmp_path, importable, monkeypatch, first: str = "by_user"):
    """The job run once (`first`) over SMALL's four files: built once per test process and copied per test to the
    same place (its file source's log names the input files by path; scenarios.Store), this test's STATEOPS_HOME.
    Returns the home's Layout and `switch(transformation) -> config path`."""
    code = os.path.join(store.root, "clicks-user-code")  # one place: the runs ship it to Spark's Python workers
    if not os.path.exists(os.path.join(code, "changed_queries.py")):
        os.makedirs(code, exist_ok=True)
        with open(os.path.join(code, "changed_queries.py"), "w") as out:
            out.write(MODULE)
    importable(code)

    def build(layout: Layout) -> None:
        generate(layout, SMALL)
        done = _cli(layout, _config(tmp_path, first), "jobs", "run", JOB)
        assert done.exit_code == 0, done.output

    layout = store.home(f"clicks-{first}", build)
    monkeypatch.setenv("STATEOPS_HOME", layout.home)
    return layout, lambda transformation: _config(tmp_path, transformation)


def _refused_with_nothing_written(layout: Layout, config: str, error_class: str, operator: str,
                                  replayed: str = "rebuild replays all 4 retained input files") -> dict:
    """`jobs check` and `jobs run` both refuse (exit 2, one line naming the operator and the rebuild); the
    checkpoint's files and the table are untouched. Returns the check's JSON."""
    checkpoint, table = os.path.join(layout.home, "checkpoints", JOB), layout.table(JOB)
    before, version = _tree(checkpoint), DeltaTable(table).version()
    earlier = len(actions.read(layout, JOB, "state_check"))

    check = _cli(layout, config, "jobs", "check", JOB, "--json")
    assert check.exit_code == 2, check.output
    report = json.loads(check.output)
    assert report["status"] == "refused" and report["compatible"] is False
    assert report["error_class"] == error_class and operator in report["operator"], report["line"]
    assert report["fix"] == REBUILD

    run = _cli(layout, config, "jobs", "run", JOB)
    assert run.exit_code == 2, run.output
    (line,) = run.output.strip().splitlines()
    assert operator in line and error_class in line and f"`{REBUILD}`" in line, line
    assert "nothing was written" in line and replayed in line, line
    assert _tree(checkpoint) == before
    assert DeltaTable(table).version() == version
    (refusal,) = actions.read(layout, JOB, "state_check")[earlier:]  # this refusal's run: one action
    assert refusal["phase"] == "refused" and refusal["details"]["fix"] == REBUILD
    return report


def test_a_run_its_state_check_refuses_has_retired_nothing(spark, scenario_store, monkeypatch, tmp_path, importable):
    """A run's checks come first, as a plan (stateops.jobs.runtime.run_plan): a query that no longer fits its state
    is refused before the run retires an old dead-letter query (its checkpoint stays byte for byte, no retirement
    journaled); the next run of the query that fits retires it."""
    from stateops.jobs.definition.environment import Environment
    from tests.support.legacy_homes import run_deadletter_query
    from tests.support.trees import file_hashes

    layout, clicks = _clicks(scenario_store, tmp_path, importable, monkeypatch)
    run_deadletter_query(spark, Environment.from_env(layout=layout, config_path=clicks("by_user")).catalog.job(JOB),
                         layout)
    legacy = layout.deadletter_checkpoint(JOB)
    before = file_hashes(legacy)
    refused = _cli(layout, clicks("by_action"), "jobs", "run", JOB)
    assert refused.exit_code == 2 and "STATE_KEY_COLUMNS_CHANGED" in refused.output, refused.output
    assert file_hashes(legacy) == before and not actions.read(layout, JOB, "deadletter_retired")
    fits = _cli(layout, clicks("by_user"), "jobs", "run", JOB)
    assert fits.exit_code == 0, fits.output
    assert not os.path.exists(legacy) and [r["phase"] for r in actions.read(layout, JOB, "deadletter_retired")] == [
        "done"]


def test_a_changed_aggregation_key_is_refused_before_the_run_and_the_rebuild_gives_the_new_query(spark,
                                                                                                 scenario_store,
                                                                                                 monkeypatch,
                                                                                                 tmp_path,
                                                                                                 importable):
    layout, clicks = _clicks(scenario_store, tmp_path, importable, monkeypatch)
    # user_id -> action: both strings, so Spark's own check (by position and type) would let the run start and
    # count actions into the users' windows; StateOps compares the key columns by name too.
    config = clicks("by_action")
    report = _refused_with_nothing_written(layout, config, "STATE_KEY_COLUMNS_CHANGED", "stateStoreSave")
    assert "(window, user_id) -> (window, action)" in report["change"], report

    # A runbook that keeps the checkpoint (adjust) would restart into the same refusal: refused before it stops
    # or archives anything.
    before = _tree(os.path.join(layout.home, "checkpoints", JOB))
    adjusted = _cli(layout, config, "recover", "run", JOB, "--mode", "adjust", "--watermark", "20 minutes",
                    "--confirm", JOB)
    assert adjusted.exit_code == 2, adjusted.output
    assert "STATE_KEY_COLUMNS_CHANGED" in adjusted.output and f"`{REBUILD}`" in adjusted.output, adjusted.output
    assert _tree(os.path.join(layout.home, "checkpoints", JOB)) == before
    assert not os.path.exists(os.path.join(layout.ops_dir(JOB), "archives"))

    done = _cli(layout, config, "recover", "run", JOB, "--mode", "rebuild", "--confirm", JOB)
    assert done.exit_code == 0, done.output
    more_input(layout, hour=1, seed=9)  # the next run: two more files
    again = _cli(layout, config, "jobs", "run", JOB)
    assert again.exit_code == 0, again.output

    batches = oracle.typed_batches(layout.landing("events"), "events")
    expected = oracle.user_activity([[{**row, "user_id": row["action"]} for row in batch] for batch in batches],
                                    DELAY_MS)
    actions_seen = {row["action"] for batch in batches for row in batch}
    got = [row for row in table_rows(layout.table(JOB), ["window_start", "window_end", "group_key", "events",
                                                          "value_sum"]) if row[2] in actions_seen]
    assert len(got) == len(set(got))
    assert {(a, b, c, d, round(e, 6)) for a, b, c, d, e in got} == {(a, b, c, d, round(e, 6))
                                                                     for a, b, c, d, e in expected}
    check = _cli(layout, config, "jobs", "check", JOB)
    assert check.exit_code == 0 and "fits the state" in check.output, check.output


@pytest.mark.parametrize("transformation, error_class, operator", [
    ("dedup_two_columns", "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "dedupeWithinWatermark"),
    ("more_aggregates", "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE", "stateStoreSave"),
    ("no_dedup", "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA", "stateful operators"),
])
def test_changes_spark_would_refuse_at_the_first_batch_are_refused_before_it(spark, scenario_store, monkeypatch,
                                                                             tmp_path, importable, transformation,
                                                                             error_class, operator):
    layout, clicks = _clicks(scenario_store, tmp_path, importable, monkeypatch)
    report = _refused_with_nothing_written(layout, clicks(transformation), error_class, operator)
    assert "->" in report["change"]


def test_same_typed_values_swapped_or_from_another_column_are_refused_though_spark_accepts_them(spark, scenario_store,
                                                                                                monkeypatch, tmp_path,
                                                                                                importable):
    """Spark compares an aggregation's stored values by position and type only: `max(value) AS hi, min(value) AS
    lo` written the other way round passes its check, and the windows open across the change would then take the
    old maxima as minima. The run records what produced each stored value; `jobs check` and the run compare with it
    and refuse before anything is written, naming the fields. A change outside state still fits; a checkpoint
    whose record is gone (a query StateOps did not run) fits and says what it could not check."""
    layout, extremes = _clicks(scenario_store, tmp_path, importable, monkeypatch, first="hi_lo")
    kept = json.loads(open(layout.state_meaning(JOB)).read())
    assert kept["values"] == {"0": ["count(1)", "max(value)", "min(value)"]}, kept  # operator 0: the aggregation

    report = _refused_with_nothing_written(layout, extremes("lo_hi"), "STATE_VALUES_CHANGED",
                                           "stateStoreSave")
    assert "value fields (count(1), max(value), min(value)) -> (count(1), min(value), max(value))" in \
        report["change"], report
    report = _refused_with_nothing_written(layout, extremes("hi_of_action"), "STATE_VALUES_CHANGED",
                                           "stateStoreSave")
    assert "max(value), min(value)) -> (count(1), max(cast(length(action) as double)), min(value))" in \
        report["change"], report

    fits = _cli(layout, extremes("hi_lo_flagged"), "jobs", "check", JOB, "--json")
    assert fits.exit_code == 0 and json.loads(fits.output)["unchecked"] is None, fits.output
    os.remove(layout.state_meaning(JOB))
    unrecorded = _cli(layout, extremes("lo_hi"), "jobs", "check", JOB)
    assert unrecorded.exit_code == 0, unrecorded.output
    (line,) = unrecorded.output.strip().splitlines()
    assert "fits the state" in line and "was not recorded by a StateOps run" in line, line
    assert "a swap of same-typed values cannot be checked" in line, line


# [rounded_output] in the long tier: the default run's [with_source] is the same rule (a change outside state fits)
@pytest.mark.parametrize("transformation", [pytest.param("rounded_output", marks=pytest.mark.long), "with_source"])
def test_a_change_outside_state_is_not_refused(spark, scenario_store, monkeypatch, tmp_path, importable,
                                               transformation):
    layout, clicks = _clicks(scenario_store, tmp_path, importable, monkeypatch)
    config = clicks(transformation)
    check = _cli(layout, config, "jobs", "check", JOB, "--json")
    assert check.exit_code == 0, check.output
    report = json.loads(check.output)
    assert report["status"] == "compatible" and report["compatible"] is True
    assert {s["operator_name"] for s in report["stored"]} == {"stateStoreSave", "dedupeWithinWatermark"}
    more_input(layout, hour=1, seed=9)
    run = _cli(layout, config, "jobs", "run", JOB)
    assert run.exit_code == 0 and f"{JOB}: 2 batches" in run.output, run.output
    assert actions.read(layout, JOB, "state_check") == []


# [paid_same_amount] in the long tier: Spark's own key-schema refusal is the default run's [dedup_two_columns]
@pytest.mark.parametrize("transformation, error_class", [
    pytest.param("paid_same_amount", "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", marks=pytest.mark.long),
    ("paid_by_payment_id", "STATE_KEY_COLUMNS_CHANGED"),
])
def test_a_changed_join_condition_is_refused_before_the_run(spark, layout, tmp_path, importable, transformation,
                                                             error_class):
    code = tmp_path / "user_code"
    code.mkdir()
    (code / "changed_queries.py").write_text(MODULE)
    importable(code)
    generate(layout, replace(SMALL, events=60, orders=80, files=3))
    done = _cli(layout, _config(tmp_path, "paid", ORDERS_PAYMENTS), "jobs", "run", JOB)
    assert done.exit_code == 0 and f"{JOB}: 3 batches" in done.output, done.output
    config = _config(tmp_path, transformation, ORDERS_PAYMENTS)
    report = _refused_with_nothing_written(layout, config, error_class, "symmetricHashJoin",
                                           replayed="rebuild replays all 6 retained input files")
    assert "order_id" in report["change"], report
    if transformation == "paid_by_payment_id":
        # the checkpoint of a query StateOps did not start (no join keys kept): the swap is read from the join's own
        # state, and the unchanged query still fits
        os.remove(layout.state_meaning(JOB))
        same = _cli(layout, _config(tmp_path, "paid", ORDERS_PAYMENTS), "jobs", "check", JOB, "--json")
        assert same.exit_code == 0 and json.loads(same.output)["status"] == "compatible", same.output
        config = _config(tmp_path, transformation, ORDERS_PAYMENTS)  # (one config file: written again)
        report = _refused_with_nothing_written(layout, config, error_class, "symmetricHashJoin",
                                               replayed="rebuild replays all 6 retained input files")
        assert "as the checkpoint's state holds them) -> (order_id = payment_id)" in report["change"], report


def test_dagster_shows_the_refusal_and_the_health_sensor_alerts_instead_of_restarting(spark, scenario_store,
                                                                                      monkeypatch, tmp_path,
                                                                                      importable, dagster_instance):
    """The materialization of the changed job fails in one line naming the rebuild, the asset check
    `state_compatible` fails with severity ERROR, and the health decision for that failed run is an alert."""
    from dagster import AssetCheckSeverity, AssetSelection, materialize

    from stateops.audit import Thresholds
    from stateops.dagster.audits.checks import build_compatibility_check
    from stateops.dagster.resources import PathsResource, SparkResource
    from stateops.dagster.streaming_jobs.assets import build_job_asset
    from stateops.jobs.definition.environment import get_job
    from stateops.remediation.policy import Policy
    from stateops.remediation.tick import Watched, health_decisions

    layout, clicks = _clicks(scenario_store, tmp_path, importable, monkeypatch)
    config = clicks("by_action")
    spec = get_job(JOB, config_path=config, layout=layout)
    asset, check = build_job_asset(spec), build_compatibility_check(spec)
    resources = {"spark": SparkResource(), "paths": PathsResource(home=layout.home, config=config)}
    checkpoint = spec.checkpoint_path(layout)
    before = _tree(checkpoint)

    run = materialize([asset, check], selection=AssetSelection.assets(asset).without_checks(),
                      instance=dagster_instance, resources=resources, raise_on_error=False)
    assert not run.success
    (failure,) = [e for e in run.all_events if e.is_step_failure]
    assert f"`{REBUILD}`" in failure.step_failure_data.error.message and "stateStoreSave" in \
        failure.step_failure_data.error.message
    assert _tree(checkpoint) == before

    checked = materialize([asset, check], selection=AssetSelection.checks(check), instance=dagster_instance,
                          resources=resources)
    (evaluation,) = checked.get_asset_check_evaluations()
    assert evaluation.check_name == "state_compatible" and not evaluation.passed
    assert evaluation.severity == AssetCheckSeverity.ERROR
    assert evaluation.metadata["fix"].value == REBUILD
    assert evaluation.metadata["error_class"].value == "STATE_KEY_COLUMNS_CHANGED"

    watched = Watched(JOB, checkpoint, Policy(), Thresholds(), "10 minutes", "5 minutes", (layout.landing("events"),))
    last = {"run_id": run.run_id, "status": "FAILURE", "ended_at": None}
    (decision,) = health_decisions(layout, [watched], {JOB: {"state": "idle", "lease": None}}, {JOB: last},
                                   now=None).values()
    assert decision.action == "alert" and decision.rule == "health.state_incompatible -> alert", decision
    assert REBUILD in decision.reason


TWS_MODULE = '''
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor


class Counter(StatefulProcessor):
    """Events per user so far, in one value state of SCHEMA."""

    SCHEMA = "events INT"

    def init(self, handle):
        self.count = handle.getValueState("count", self.SCHEMA)

    def handleInputRows(self, key, rows, timerValues):
        total = self.count.get()[0] if self.count.exists() else 0
        for pdf in rows:
            total += len(pdf)
        self.count.update((total,))
        yield pd.DataFrame({"group_key": [key[0]], "events": [int(total)]})

    def close(self):
        pass


class WideCounter(Counter):
    SCHEMA = "events LONG"


def _counted(events, processor):
    return events.groupBy("user_id").transformWithStateInPandas(processor, "group_key STRING, events LONG",
                                                                "Update", "None")


def counts(events):
    return _counted(events, Counter())


def wide_counts(events):  # the state's value field widened: INT -> LONG
    return _counted(events, WideCounter())
'''
TWS_JOB = """output_mode = "update"
merge_keys = ["group_key"]

[[jobs.{job}.inputs]]
name = "events"
schema = "event_id STRING, user_id STRING, event_time TIMESTAMP, action STRING, value DOUBLE"
time_column = "event_time"
"""
ENCODING = "spark.sql.streaming.stateStore.encodingFormat"


@pytest.mark.long  # the default run: Spark's schema rules on the aggregation, the join and unchanged state (above)
@pytest.mark.parametrize("encoding, fits", [("avro", True), ("unsaferow", False)])
def test_a_widened_transform_with_state_value_fits_under_avro_encoding_only(spark, layout, tmp_path, importable,
                                                                            encoding, fits):
    """Spark's own rule, applied before the run: a transformWithState value field may widen (INT -> LONG) when the
    checkpoint's state is Avro-encoded (set before its first run; the checkpoint keeps it), not otherwise."""
    code = tmp_path / "user_code"
    code.mkdir()
    (code / "counters.py").write_text(TWS_MODULE)  # a name of its own: Spark's Python workers keep modules
    importable(code)
    generate(layout, SMALL)
    before = spark.conf.get(ENCODING, None)
    spark.conf.set(ENCODING, encoding)
    try:
        done = _cli(layout, _config(tmp_path, "counts", TWS_JOB, "counters"), "jobs", "run", JOB)
    finally:
        spark.conf.unset(ENCODING) if before is None else spark.conf.set(ENCODING, before)
    assert done.exit_code == 0, done.output
    config = _config(tmp_path, "wide_counts", TWS_JOB, "counters")
    if not fits:
        report = _refused_with_nothing_written(layout, config, "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
                                               "transformWithStateInPandasExec")
        assert "events:int" in report["change"] and "events:bigint" in report["change"], report
        return
    check = _cli(layout, config, "jobs", "check", JOB, "--json")
    assert check.exit_code == 0 and json.loads(check.output)["status"] == "compatible", check.output
    more_input(layout, hour=1, seed=9)
    run = _cli(layout, config, "jobs", "run", JOB)
    assert run.exit_code == 0 and f"{JOB}: 2 batches" in run.output, run.output
    batches = oracle.typed_batches(layout.landing("events"), "events")
    expected = {}
    for row in (row for batch in batches for row in batch):
        expected[row["user_id"]] = expected.get(row["user_id"], 0) + 1
    assert dict(table_rows(layout.table(JOB), ["group_key", "events"])) == expected
