"""`recover --mode migrate`: a changed stateful query keeps its state, rewritten for the new query, with no input
read again, and the runs after it give what the new query gives from scratch.

A user's job (a module of this test, registered by a config file) runs over four files with one query; its config
then names another transformation, as a user editing the job would; the migration runs; two more files arrive and
the job runs again. Oracle: the same new query run from scratch as a second job over all six files, one file per
batch as the first (tests/support/oracle.py's rule: the same batches give the same watermarks), its Delta table
compared row for row; for a partial change, from the boundary the plan named. Spark's own state reader counts the
migrated state; the checkpoint's offsets and the input files read show that nothing was read again.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
from click.testing import CliRunner

from stateops import actions
from stateops.cli.main import main
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.jobs.demo.generator import generate
from stateops.layout import Layout
from tests.support.delta_rows import table_rows
from tests.support import migration_join
from tests.support.migration_job import FRESH, JOB, config as _config, write_code
from tests.support.scenarios import SMALL

pytestmark = pytest.mark.spark


def _cli(layout: Layout, config: str, *args: str):
    return CliRunner().invoke(main, ["--home", layout.home, "--config", config, *args])


def _clicks(scenario_store, tmp_path, importable, monkeypatch):
    """The job run once with `hi_lo` over SMALL's four files (built once per test process, copied per test), this
    test's STATEOPS_HOME. Returns (layout, config(**transformations) -> path)."""
    importable(write_code(os.path.join(scenario_store.root, "migrated-user-code")))

    def build(layout: Layout) -> None:
        generate(layout, SMALL)
        done = _cli(layout, _config(tmp_path, **{JOB: "hi_lo"}), "jobs", "run", JOB)
        assert done.exit_code == 0 and f"{JOB}: 4 batches" in done.output, done.output

    layout = scenario_store.home("migration-hi-lo", build)
    monkeypatch.setenv("STATEOPS_HOME", layout.home)
    return layout, lambda **t: _config(tmp_path, **t)


def _state_rows(spark, checkpoint: str, operator: int = 0) -> int:
    return spark.read.format("statestore").option("operatorId", operator).load(checkpoint).count()


def _rows(layout: Layout, job: str, columns: list[str]) -> set[tuple]:
    return {tuple(round(v, 6) if isinstance(v, float) else v for v in row)
            for row in table_rows(layout.table(job), columns)}


def _migrate(layout: Layout, config: str, job: str = JOB) -> dict:
    """Plan (JSON), then run the migration; returns the plan's migration."""
    planned = _cli(layout, config, "recover", "plan", job, "--mode", "migrate", "--json")
    assert planned.exit_code == 0, planned.output
    migration = json.loads(planned.output)["migration"]
    done = _cli(layout, config, "recover", "run", job, "--mode", "migrate", "--confirm", job)
    assert done.exit_code == 0 and "succeeded" in done.output, done.output
    return migration


# Two more files whose first continues where the state stands (its events from ten minutes before the last file's
# end: the windows still open in the state get rows), the second after it.
MORE = replace(SMALL, files=2, events=200, seed=9, start="2026-01-01T00:50:00+00:00", minutes_per_file=10)


def _then_both(layout: Layout, config: str) -> None:
    """Two more files; the migrated job and the same query from scratch each run over what they have not read."""
    generate(layout, MORE)
    for job, batches in ((JOB, 2), (FRESH, 6)):
        run = _cli(layout, config, "jobs", "run", job)
        assert run.exit_code == 0 and f"{job}: {batches} batches" in run.output, run.output


def test_two_same_typed_aggregates_reordered_are_refused_by_the_check_then_migrated_exactly(
        spark, scenario_store, tmp_path, importable, monkeypatch):
    layout, config = _clicks(scenario_store, tmp_path, importable, monkeypatch)
    checkpoint = os.path.join(layout.home, "checkpoints", JOB)
    opened = Checkpoint.open(checkpoint)
    offsets_before, rows_before = opened.offset_batches(), _state_rows(spark, checkpoint)
    changed = config(**{JOB: "lo_hi", FRESH: "lo_hi"})
    check = _cli(layout, changed, "jobs", "check", JOB)
    assert check.exit_code == 2 and "STATE_VALUES_CHANGED" in check.output, check.output

    migration = _migrate(layout, changed)
    (change,) = [c for c in migration["changes"]]
    assert (change["operator"], change["store"], change["change"], change["carried"]) == (
        "operator 0 (stateStoreSave)", "default", "reorder", "exact"), change
    assert change["boundary"] is None and "read each old buffer as another aggregate's" in change["reason"]
    assert Checkpoint.open(checkpoint).offset_batches() == offsets_before, "no batch planned, no input read"
    assert _state_rows(spark, checkpoint) == rows_before, "every key kept (Spark's reader)"
    fits = _cli(layout, changed, "jobs", "check", JOB)
    assert fits.exit_code == 0 and "fits the state" in fits.output, fits.output

    _then_both(layout, changed)
    columns = ["window_start", "window_end", "group_key", "events", "hi", "lo"]
    migrated, fresh = _rows(layout, JOB, columns), _rows(layout, FRESH, columns)
    assert migrated == fresh, (sorted(migrated - fresh)[:3], sorted(fresh - migrated)[:3])


def _tree(path: str) -> dict[str, tuple[int, int]]:
    found = {}
    for folder, _, names in os.walk(path):
        for name in names:
            stat = os.stat(os.path.join(folder, name))
            found[os.path.relpath(os.path.join(folder, name), path)] = (stat.st_size, stat.st_mtime_ns)
    return found


COLUMNS = ["window_start", "window_end", "group_key", "events"]


# [hi_only, hi_lo_15] in the long tier: the default run's reorder test is the same rewrite (values by position)
@pytest.mark.parametrize("transformation, kind, columns, length", [
    pytest.param("hi_only", "remove_aggregate", ["hi"], None, marks=pytest.mark.long),
    pytest.param("hi_lo_15", "window_multiple", ["hi", "lo"], 15, marks=pytest.mark.long),
])
def test_an_exact_change_migrated_gives_the_new_query_row_for_row(spark, scenario_store, tmp_path, importable,
                                                                    monkeypatch, transformation, kind, columns, length):
    layout, config = _clicks(scenario_store, tmp_path, importable, monkeypatch)
    changed = config(**{JOB: transformation, FRESH: transformation})
    migration = _migrate(layout, changed)
    assert [c["change"] for c in migration["changes"]] == [kind] and migration["carried"] == "exact", migration
    _then_both(layout, changed)
    migrated, fresh = _rows(layout, JOB, COLUMNS + columns), _rows(layout, FRESH, COLUMNS + columns)
    if length:  # the old query's shorter windows stay in the table as they were written; the new ones must match
        minutes = {(row[1] - row[0]) // 60_000 for row in migrated}  # epoch milliseconds
        migrated = {row for row in migrated if row[1] - row[0] == length * 60_000}
        assert minutes == {5, length} and migrated, minutes
        fresh = {row for row in fresh if (row[0], row[2]) in {(r[0], r[2]) for r in migrated}}
    assert migrated == fresh, (sorted(migrated - fresh)[:3], sorted(fresh - migrated)[:3])


# [hi_lo_deduped] in the long tier: the default run's [hi_lo_total] is the same rule (complete from the boundary)
@pytest.mark.parametrize("transformation, kind, columns", [
    ("hi_lo_total", "add_aggregate", ["hi", "lo", "total"]),
    pytest.param("hi_lo_deduped", "add_operator", ["hi", "lo"], marks=pytest.mark.long),
])
def test_a_partial_change_is_exact_from_the_boundary_the_plan_named(spark, scenario_store, tmp_path, importable,
                                                                     monkeypatch, transformation, kind, columns):
    layout, config = _clicks(scenario_store, tmp_path, importable, monkeypatch)
    changed = config(**{JOB: transformation, FRESH: transformation})
    migration = _migrate(layout, changed)
    (change,) = migration["changes"]
    assert change["change"] == kind and change["carried"] == "partial" and migration["carried"] == "partial"
    boundary = change["boundary"]
    latest = Checkpoint.open(os.path.join(layout.home, "checkpoints", JOB)).latest_committed_batch()
    assert boundary["batch"] == latest + 1 and boundary == migration["boundary"], boundary
    assert boundary["complete_from_ms"] == boundary["watermark_ms"] + 10 * 60 * 1000
    (owed,) = [r for r in actions.read(layout, JOB, "migration_debt")]
    assert owed["phase"] == "open" and owed["details"]["boundary"] == boundary
    _then_both(layout, changed)
    since = boundary["complete_from_ms"]
    migrated, fresh = ({row for row in _rows(layout, job, COLUMNS + columns) if row[0] >= since}
                       for job in (JOB, FRESH))
    assert migrated and migrated == fresh, (sorted(migrated - fresh)[:3], sorted(fresh - migrated)[:3])

    # the debt: `jobs check` and `jobs describe` say it until the watermark passes the last window opened before
    # the boundary (5 minutes after it), then it is settled
    check = _cli(layout, changed, "jobs", "check", JOB, "--json")
    assert check.exit_code == 0 and json.loads(check.output)["debt"]["settled"] is False, check.output
    assert f"migration {owed['runbook_id']} is partial" in json.loads(check.output)["line"]
    generate(layout, replace(SMALL, files=1, events=100, seed=11, start="2026-01-01T01:30:00+00:00",
                             minutes_per_file=10))
    assert _cli(layout, changed, "jobs", "run", JOB).exit_code == 0
    described = json.loads(_cli(layout, changed, "jobs", "describe", JOB, "--json").output)
    assert described["migration_debt"]["settled"] is True, described["migration_debt"]
    check = _cli(layout, changed, "jobs", "check", JOB)
    assert check.exit_code == 0 and "is partial" not in check.output, check.output


def test_an_impossible_change_is_refused_by_the_plan_in_one_line_and_nothing_changes(spark, scenario_store, tmp_path,
                                                                                       importable, monkeypatch):
    layout, config = _clicks(scenario_store, tmp_path, importable, monkeypatch)
    changed = config(**{JOB: "hi_lo_by_action"})
    checkpoint = os.path.join(layout.home, "checkpoints", JOB)
    before = _tree(checkpoint)
    planned = _cli(layout, changed, "recover", "plan", JOB, "--mode", "migrate", "--json")
    assert planned.exit_code == 2, planned.output
    shown = json.loads(planned.stdout)
    (change,) = [c for c in shown["migration"]["changes"] if c["carried"] == "impossible"]
    assert change["change"] == "finer_key" and "never held (action)" in change["reason"], change
    (line,) = planned.stderr.strip().splitlines()
    assert "cannot migrate the state" in line and "finer_key" in line and "Fix: rebuild" in line, line
    run = _cli(layout, changed, "recover", "run", JOB, "--mode", "migrate", "--confirm", JOB)
    assert run.exit_code == 2 and "never held (action)" in run.output, run.output
    assert _tree(checkpoint) == before
    assert not os.path.exists(os.path.join(layout.ops_dir(JOB), "archives"))
    # an output column the table holds as another type: refused before anything (the first write would fail)
    retyped = _cli(layout, config(**{JOB: "lo_hi_float"}), "recover", "plan", JOB, "--mode", "migrate")
    assert retyped.exit_code == 2, retyped.output
    (line,) = retyped.stderr.strip().splitlines()
    assert "writes column hi as float" in line and "holds it as double" in line and "nothing was changed" in line, line
    assert _tree(checkpoint) == before


def test_a_users_transform_carries_what_stateops_cannot_derive_and_a_misfit_is_refused(
        spark, scenario_store, tmp_path, importable, monkeypatch):
    """A key column renamed before the grouping: StateOps cannot tell it from another string column (finer_key,
    impossible); the user's rule says it is the same values, its output is checked against the new query's state
    schema before anything is written (a misfit refused in one line), and the table is then the new query's."""
    layout, config = _clicks(scenario_store, tmp_path, importable, monkeypatch)
    changed = config(**{JOB: "hi_lo_uid", FRESH: "hi_lo_uid"})
    checkpoint = os.path.join(layout.home, "checkpoints", JOB)
    before = _tree(checkpoint)
    bad = _cli(layout, changed, "recover", "run", JOB, "--mode", "migrate", "--transform",
               "migrated_queries:key_as_number", "--confirm", JOB)
    assert bad.exit_code == 2, bad.output
    (line,) = bad.stderr.strip().splitlines()
    assert "--transform migrated_queries:key_as_number for operator 0 (stateStoreSave): its key is " in line, line
    assert "struct<window:struct<start:timestamp,end:timestamp>,uid:int>" in line and "nothing was changed" in line
    assert _tree(checkpoint) == before
    # a rule that fails while its rows are written: rolled back, the old state (and what it means) back, nothing
    # restarted (the changed query does not fit the old state), the job's lock released
    failed = _cli(layout, changed, "recover", "run", JOB, "--mode", "migrate", "--transform",
                  "migrated_queries:failing_rule", "--confirm", JOB)
    assert failed.exit_code != 0 and "the rule failed" in failed.output, failed.output
    assert "ROLLED BACK" in failed.output and "nothing was restarted" in failed.output, failed.output
    assert "rollback_restart" not in failed.output and "jobs unlock" not in failed.output, failed.output
    sizes = {name: size for name, (size, _) in before.items()}  # put back from the archive: the same files
    assert {name: size for name, (size, _) in _tree(checkpoint).items()} == sizes
    old_query = _cli(layout, config(**{JOB: "hi_lo"}), "jobs", "check", JOB)
    assert old_query.exit_code == 0 and "fits the state" in old_query.output, old_query.output

    planned = _cli(layout, changed, "recover", "plan", JOB, "--mode", "migrate", "--transform",
                   "migrated_queries:renamed_key", "--json")
    assert planned.exit_code == 0, planned.output
    (change,) = json.loads(planned.output)["migration"]["changes"]
    assert change["change"] == "finer_key" and change["carried"] == "exact", change
    assert change["reason"].startswith("by your rule migrated_queries:renamed_key (StateOps would not: ")
    done = _cli(layout, changed, "recover", "run", JOB, "--mode", "migrate", "--transform",
                "migrated_queries:renamed_key", "--confirm", JOB)
    assert done.exit_code == 0 and "succeeded" in done.output, done.output
    _then_both(layout, changed)
    columns = ["window_start", "window_end", "group_key", "events", "hi", "lo"]
    migrated, fresh = _rows(layout, JOB, columns), _rows(layout, FRESH, columns)
    assert migrated == fresh, (sorted(migrated - fresh)[:3], sorted(fresh - migrated)[:3])


def _join_rows(spark, checkpoint: str) -> dict[str, list[tuple]]:
    """Each join store's rows (Spark's reader): a side's rows as (key, value) without the index; its counts."""
    found = {}
    for side in ("left", "right"):
        for store in ("keyWithIndexToValue", "keyToNumValues"):
            rows = spark.read.format("statestore").option("operatorId", 0).option("storeName", f"{side}-{store}")
            found[f"{side}-{store}"] = [tuple(r.key)[:-1] + tuple(r.value) if store == "keyWithIndexToValue" else
                                        tuple(r.key) + tuple(r.value) for r in rows.load(checkpoint).collect()]
    return found


@pytest.mark.long  # the default run: the migration of an aggregation (above); a join's four stores here
@pytest.mark.parametrize("transformation, kind", [("by_order_and_user", "join_key"), ("by_order_double", "widen")])
def test_a_join_re_keyed_or_its_buffered_type_widened_is_migrated_exactly(spark, tmp_path, importable, monkeypatch,
                                                                           transformation, kind):
    """An inner join of orders and payments (four stores on the in-memory store) re-keyed from order_id to
    (order_id, user_id), or its buffered amounts widened from float to double: each side's buffered rows re-keyed,
    re-indexed and cast, their counts per key made from them; then the orders buffered before the migration meet
    their payments after it as the new query from scratch has them meet."""
    join, fresh = migration_join.JOB, migration_join.FRESH
    layout = Layout(str(tmp_path / "stateops"))
    monkeypatch.setenv("STATEOPS_HOME", layout.home)
    importable(migration_join.write_code(str(tmp_path / "user-code")))
    migration_join.write_input(layout, range(migration_join.BEFORE))
    first = _cli(layout, migration_join.config(tmp_path, **{join: "by_order"}), "jobs", "run", join)
    assert first.exit_code == 0 and f"{join}: {migration_join.BEFORE} batches" in first.output, first.output
    checkpoint = layout.checkpoint(join)
    offsets, before = Checkpoint.open(checkpoint).offset_batches(), _join_rows(spark, checkpoint)
    assert before["left-keyWithIndexToValue"] and before["right-keyWithIndexToValue"]

    if kind == "join_key":  # re-keyed by a column the state never buffered: refused, nothing changed
        unbuffered = migration_join.config(tmp_path, **{join: "by_order_and_region"})
        planned = _cli(layout, unbuffered, "recover", "plan", join, "--mode", "migrate")
        assert planned.exit_code == 2 and "never held" in planned.output and "Fix: rebuild" in planned.output, \
            planned.output
        assert _join_rows(spark, checkpoint) == before
    changed = migration_join.config(tmp_path, **{join: transformation, fresh: transformation})
    earlier = _cli(layout, changed, "jobs", "run", fresh)  # the new query from scratch over the same files
    assert earlier.exit_code == 0 and f"{fresh}: {migration_join.BEFORE} batches" in earlier.output, earlier.output
    columns = migration_join.COLUMNS
    emitted = {j: set(table_rows(layout.table(j), columns)) for j in (join, fresh)}  # each query's, appended
    migration = _migrate(layout, changed, join)
    assert {(c["change"], c["carried"]) for c in migration["changes"]} == {(kind, "exact")}, migration["changes"]
    assert sorted(r["store"] for r in migration["rewrites"]) == sorted(before)
    assert Checkpoint.open(checkpoint).offset_batches() == offsets, "no batch planned, no input read"
    after = _join_rows(spark, checkpoint)
    for side in ("left", "right"):  # every buffered row kept, under its new key; the counts made from them
        rows, counts = after[f"{side}-keyWithIndexToValue"], after[f"{side}-keyToNumValues"]
        assert len(rows) == len(before[f"{side}-keyWithIndexToValue"])
        width = len(counts[0]) - 1  # the join key's fields
        assert sum(c[-1] for c in counts) == len(rows) and len(counts) == len({r[:width] for r in rows})
    if kind == "join_key":
        assert all(len(r) == len(before["left-keyWithIndexToValue"][0]) + 1 for r in after["left-keyWithIndexToValue"])

    migration_join.write_input(layout, range(migration_join.BEFORE, migration_join.FILES))
    for job in (join, fresh):
        run = _cli(layout, changed, "jobs", "run", job)
        assert run.exit_code == 0 and f"{job}: 2 batches" in run.output, run.output
    # the rows the two batches after the migration appended, against the new query's own two batches
    migrated, expected = ({r for r in table_rows(layout.table(j), columns) if r not in emitted[j]} for j in (join, fresh))
    assert migrated == expected, (sorted(migrated - expected)[:3], sorted(expected - migrated)[:3])
    cut = 40 * 60 * 1000 + 1767225600000  # the migration's input ends at 00:40
    assert any(r[2] < cut <= r[6] for r in migrated), "an order buffered before the migration met its payment after"
    if kind == "join_key":
        assert all(r[1] == r[5] for r in migrated if r[6] >= cut), "a payment by another user no longer matches"


@pytest.mark.long  # transformWithStateInPandas runs in Python workers; the default run migrates aggregations (above)
def test_a_query_with_a_transform_with_state_operator_migrates_with_its_variables_kept(spark, tmp_path, importable,
                                                                                       monkeypatch):
    """examples/engagement.py (a dedup, then transformWithStateInPandas with a value and a map state under TTL) with
    its dedup removed (exact: the dedup's folder leaves, the transformWithState operator keeps its files): the
    operator metadata Spark writes for transformWithState names its schema files by absolute path, which must name
    them where the migrated state lives (they named the folder the new query was planned in, and the migration failed
    at its check). Oracle: the old query run on uninterrupted by a second job, over input with no duplicates after
    the migration (where the dedup would drop nothing): the same table; Spark's reader: the same variables' rows."""
    import shutil

    from stateops.checkpoints.schemas import STATE_SCHEMA
    from tests.support import ROOT

    folder = tmp_path / "user-code"
    folder.mkdir()
    source = os.path.join(ROOT, "examples", "engagement.py")
    shutil.copy(source, folder / "engagement.py")
    with open(source) as handle:
        text = handle.read()
    assert 'events.dropDuplicatesWithinWatermark(["event_id"]).groupBy("user_id")' in text
    (folder / "engagement_undeduped.py").write_text(
        text.replace('events.dropDuplicatesWithinWatermark(["event_id"]).groupBy("user_id")', 'events.groupBy("user_id")'))
    importable(str(folder))
    with open(os.path.join(ROOT, "examples", "engagement.toml")) as handle:
        job = handle.read()
    config = tmp_path / "engagement.toml"
    config.write_text(job + job.replace("[jobs.user_engagement", "[jobs.engagement_on").replace(
        "[[jobs.user_engagement", "[[jobs.engagement_on"))
    changed = tmp_path / "engagement-undeduped.toml"
    changed.write_text(config.read_text().replace('"engagement:user_engagement"', '"engagement_undeduped:user_engagement"', 1))
    layout = Layout(str(tmp_path / "stateops"))
    monkeypatch.setenv("STATEOPS_HOME", layout.home)
    generate(layout, SMALL)
    for name in ("user_engagement", "engagement_on"):
        run = _cli(layout, str(config), "jobs", "run", name)
        assert run.exit_code == 0, run.output
    checkpoint = layout.checkpoint("user_engagement")

    def variables() -> dict[str, int]:
        reader = spark.read.format("statestore").option("operatorId", 0)
        return {v: reader.option("stateVarName", v).load(checkpoint).count() for v in ("summary", "actions")}

    before = variables()
    migration = _migrate(layout, str(changed), "user_engagement")
    assert [(c["change"], c["carried"]) for c in migration["changes"]] == [("remove_operator", "exact")]
    assert variables() == before and all(before.values())
    assert Checkpoint.open(checkpoint).operator_ids() == [0]
    for rel in Checkpoint.open(checkpoint).operator_metadata_files(-1):
        for path in json.loads(open(rel).read().split("\n", 1)[1])["stateStoreInfo"][0]["stateSchemaFilePaths"]:
            assert path.startswith(f"file:{checkpoint}/state/0/{STATE_SCHEMA}/") and os.path.exists(path[5:]), path

    generate(layout, replace(MORE, duplicate_share=0.0, late_share=0.0, malformed_share=0.0))
    for config_path, name in ((changed, "user_engagement"), (config, "engagement_on")):
        run = _cli(layout, str(config_path), "jobs", "run", name)
        assert run.exit_code == 0 and f"{name}: 2 batches" in run.output, run.output
    columns = ["user_id", "events", "value_sum", "first_event_time", "last_event_time", "top_action",
               "top_action_events"]
    migrated, continued = _rows(layout, "user_engagement", columns), _rows(layout, "engagement_on", columns)
    assert migrated == continued, (sorted(migrated - continued)[:3], sorted(continued - migrated)[:3])
