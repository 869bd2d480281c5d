"""The migration's classifier (stateops.migration.classify): each of the 16 kinds of change of
../shared/reviews/MIGRATION-NOTES.md, with how it is carried and its one-line reason; a partial change always with
its boundary, never called exact; the rewrite each exact change needs. Shapes as the planner reads them
(stateops.jobs.runtime.state_shapes; the Spark test reads them from real plans)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from stateops.migration import kinds
from stateops.migration.classify import Migration, Position, classify
from stateops.migration.shape import Aggregate, Column, OperatorShape, QueryShape, Window

pytestmark = pytest.mark.unit

FIVE = Window(300_000_000, 300_000_000)
WINDOW = Column("window", "struct<start:timestamp,end:timestamp>")
USER = Column("user_id", "string")
POSITION = Position(batch=7, watermark_ms=1_000_000, delay_ms=600_000)


def agg(function: str, output: str | None, *buffer: tuple[str, str], initial: tuple[str, ...] = ()) -> Aggregate:
    name, _, rest = function.partition("(")
    return Aggregate(function, name, (rest.rstrip(")"),), tuple(Column(n, t) for n, t in buffer), output,
                     initial or tuple("NULL" for _ in buffer))


COUNT = agg("count(1)", "events", ("count", "bigint"), initial=("0L",))
HI = agg("max(value)", "hi", ("max", "double"))
LO = agg("min(value)", "lo", ("min", "double"))
AVG = agg("avg(value)", "mean", ("sum", "double"), ("count", "bigint"), initial=("0.0D", "0L"))
TOTAL = agg("sum(value)", "total", ("sum", "double"))


def windows(*aggregates: Aggregate, keys=(WINDOW, USER), window: Window | None = FIVE, op: int = 0) -> OperatorShape:
    return OperatorShape(op, "stateStoreSave", "aggregation", tuple(keys), window=window,
                         window_column="window" if window else None, aggregates=aggregates)


def dedup(*keys: str, op: int = 1) -> OperatorShape:
    return OperatorShape(op, "dedupeWithinWatermark", "dedup_within_watermark",
                         tuple(Column(k, "string") for k in keys))


def query(*ops: OperatorShape) -> QueryShape:
    return QueryShape(tuple(ops))


def one(migration: Migration, kind: str):
    found = [c for c in migration.changes if c.change == kind]
    assert len(found) == 1, migration.changes
    return found[0]


def test_no_change_is_nothing_to_migrate():
    same = classify(query(windows(COUNT, HI)), query(windows(COUNT, HI)), POSITION)
    assert same.changes == () and same.refusal().startswith("nothing to migrate")
    assert [r.how for r in same.rewrites] == ["keep"]


def test_1_a_renamed_output_column_is_native():
    found = classify(query(windows(COUNT, HI)), query(windows(COUNT, replace(HI, output="top"))), POSITION)
    change = one(found, kinds.RENAME)
    assert change.carried == kinds.NATIVE and "hi -> top" in change.reason
    assert found.refusal().startswith("nothing to migrate")


def test_2_same_typed_aggregates_reordered_are_exact_and_the_buffers_follow_the_new_order():
    found = classify(query(windows(COUNT, HI, LO)), query(windows(COUNT, LO, HI)), POSITION)
    change = one(found, kinds.REORDER)
    assert change.carried == kinds.EXACT and "read each old buffer as another aggregate's" in change.reason
    assert [v.source for v in found.rewrites[0].values] == [0, 2, 1]
    assert found.refusal() is None and found.carried == kinds.EXACT


def test_3_a_widened_type_is_exact_and_a_narrowed_one_impossible():
    narrow = agg("sum(n)", "s", ("sum", "bigint"))
    wide = agg("sum(cast(n as double))", "s", ("sum", "double"))
    found = classify(query(windows(agg("max(n)", "m", ("max", "int")))),
                     query(windows(agg("max(cast(n as bigint))", "m", ("max", "bigint")))), POSITION)
    assert one(found, kinds.WIDEN).carried == kinds.EXACT
    assert found.rewrites[0].values[0].type == "bigint"
    back = classify(query(windows(wide)), query(windows(replace(narrow, function="sum(cast(n as bigint))"))),
                    POSITION)
    change = one(back, kinds.NARROW_OR_MEANING)
    assert change.carried == kinds.IMPOSSIBLE and "Fix: rebuild" in change.reason
    assert back.refusal().startswith("operator 0 (stateStoreSave): narrow_or_meaning")


def test_4_a_removed_aggregate_is_exact():
    found = classify(query(windows(COUNT, HI, LO)), query(windows(COUNT, LO)), POSITION)
    assert one(found, kinds.REMOVE_AGGREGATE).carried == kinds.EXACT
    assert [v.source for v in found.rewrites[0].values] == [0, 2]


def test_5_an_added_aggregate_is_exact_from_the_old_buffers_or_partial_with_its_boundary():
    derived = classify(query(windows(COUNT, AVG)), query(windows(COUNT, AVG, TOTAL)), POSITION)
    assert one(derived, kinds.ADD_AGGREGATE).carried == kinds.EXACT
    assert [v.source for v in derived.rewrites[0].values] == [0, 1, 2, 1]

    added = classify(query(windows(COUNT)), query(windows(COUNT, HI)), POSITION)
    change = one(added, kinds.ADD_AGGREGATE)
    assert change.carried == kinds.PARTIAL and change.carried != kinds.EXACT
    assert change.boundary == {"batch": 8, "watermark": "1970-01-01T00:16:40+00:00", "watermark_ms": 1_000_000,
                               "complete_from": "1970-01-01T00:26:40+00:00", "complete_from_ms": 1_600_000,
                               "settled_at_watermark_ms": 1_900_000}, "the last window opened before it: +5 min"
    assert added.boundary == change.boundary and added.carried == kinds.PARTIAL
    assert added.rewrites[0].values[1].initial == "NULL" and added.rewrites[0].values[1].source is None
    unwindowed = classify(query(windows(COUNT, keys=(USER,), window=None)),
                          query(windows(COUNT, HI, keys=(USER,), window=None)), POSITION)
    assert unwindowed.boundary["settled_at_watermark_ms"] is None, "keys no watermark evicts: never settled"

    imperative = replace(agg("percentile(value)", "p", ("buf", "binary")), initial=())
    refused = classify(query(windows(COUNT)), query(windows(COUNT, imperative)), POSITION)
    assert one(refused, kinds.ADD_AGGREGATE).carried == kinds.IMPOSSIBLE


def test_6_a_coarser_key_merges_mergeable_buffers_and_refuses_the_others():
    found = classify(query(windows(COUNT, HI, keys=(WINDOW, USER, Column("action", "string")))),
                     query(windows(COUNT, HI)), POSITION)
    change = one(found, kinds.COARSER_KEY)
    assert change.carried == kinds.EXACT and "without action" in change.reason
    rewrite = found.rewrites[0]
    assert rewrite.regroup and [v.merge for v in rewrite.values] == ["sum", "max"]
    first = agg("first(value)", "f", ("first", "double"), ("valueSet", "boolean"))
    refused = classify(query(windows(first, keys=(WINDOW, USER, Column("action", "string")))),
                       query(windows(first)), POSITION)
    assert any(c.carried == kinds.IMPOSSIBLE and "do not merge" in c.reason for c in refused.changes)
    assert classify(query(dedup("event_id", "user_id")), query(dedup("event_id")), POSITION).changes[0].carried == \
        kinds.EXACT


def test_7_a_finer_key_is_impossible():
    found = classify(query(windows(COUNT)), query(windows(COUNT, keys=(WINDOW, USER, Column("country", "string")))),
                     POSITION)
    change = one(found, kinds.FINER_KEY)
    assert change.carried == kinds.IMPOSSIBLE and "never held (country)" in change.reason
    assert "rebuild" in found.refusal()


def test_8_a_tumbling_window_lengthened_to_a_multiple_is_exact():
    found = classify(query(windows(COUNT, HI)), query(windows(COUNT, HI, window=Window(900_000_000, 900_000_000))),
                     POSITION)
    change = one(found, kinds.WINDOW_MULTIPLE)
    assert change.carried == kinds.EXACT and "(3 x)" in change.reason
    assert found.rewrites[0].keys[0].window_factor == 3 and found.rewrites[0].regroup


@pytest.mark.parametrize("window", [Window(600_000_000, 600_000_000 // 2), Window(420_000_000, 420_000_000),
                                    Window(60_000_000, 60_000_000)], ids=["sliding", "not-a-multiple", "finer"])
def test_9_any_other_window_change_is_impossible(window):
    change = one(classify(query(windows(COUNT)), query(windows(COUNT, window=window)), POSITION), kinds.WINDOW_CHANGE)
    assert change.carried == kinds.IMPOSSIBLE and "holds each old window's total" in change.reason


def test_10_a_watermark_delay_is_native():
    found = classify(query(windows(COUNT)), query(windows(COUNT)), replace(POSITION, new_delay_ms=1_200_000))
    assert one(found, kinds.WATERMARK).carried == kinds.NATIVE


def test_11_an_added_operator_is_partial_and_the_others_renumber():
    found = classify(query(windows(COUNT)), query(windows(COUNT), dedup("event_id")), POSITION)
    change = one(found, kinds.ADD_OPERATOR)
    assert change.carried == kinds.PARTIAL and change.boundary["batch"] == 8
    assert "a duplicate of a row read before the migration is not recognised" in change.reason
    assert [(r.operator_id, r.how) for r in found.rewrites] == [(0, "keep"), (1, "empty")]


def test_12_a_removed_operator_is_exact():
    found = classify(query(windows(COUNT), dedup("event_id")), query(windows(COUNT)), POSITION)
    assert one(found, kinds.REMOVE_OPERATOR).carried == kinds.EXACT
    assert [(r.operator_id, r.source_id, r.how) for r in found.rewrites] == [(0, 0, "keep")]
    before = dedup("event_id", op=0)
    renumbered = classify(query(before, windows(COUNT, op=1)), query(windows(COUNT, op=0)), POSITION)
    assert [(r.operator_id, r.source_id, r.how) for r in renumbered.rewrites] == [(0, 1, "keep")], \
        "its files move to its new number"


def _join(keys, join_type="Inner", amount="float"):
    values = tuple(Column(f"{side}.{c}", "string") for side in ("left", "right") for c in ("order_id", "user_id"))
    return OperatorShape(0, "symmetricHashJoin", "join", (), values=(*values, Column("right.amount", amount)),
                         join_type=join_type, join_keys=(keys, keys))


def test_13_an_inner_join_re_keyed_by_buffered_columns_is_exact_an_outer_one_partial():
    found = classify(query(_join(("order_id",))), query(_join(("order_id", "user_id"))), POSITION)
    inner = one(found, kinds.JOIN_KEY)
    assert inner.carried == kinds.EXACT and inner.runnable and found.refusal() is None
    # each side's rows re-keyed from its buffered fields, and its counts per key from them
    assert [(r.store, r.join_key, r.placement) for r in found.rewrites] == [
        ("left-keyWithIndexToValue", ("order_id", "user_id"), -1), ("left-keyToNumValues", ("order_id", "user_id"), None),
        ("right-keyWithIndexToValue", ("order_id", "user_id"), -1),
        ("right-keyToNumValues", ("order_id", "user_id"), None)]
    assert [len(r.values) for r in found.rewrites] == [2, 2, 3, 3]
    assert Migration.from_dict(found.to_dict()) == found
    outer = one(classify(query(_join(("order_id",), "LeftOuter")), query(_join(("user_id",), "LeftOuter")),
                         POSITION), kinds.JOIN_KEY)
    assert outer.carried == kinds.PARTIAL and outer.boundary
    missing = one(classify(query(_join(("order_id",))), query(_join(("country",))), POSITION), kinds.JOIN_KEY)
    assert missing.carried == kinds.IMPOSSIBLE and "right.country" in missing.reason


def test_3_a_buffered_column_widened_is_exact_and_narrowed_impossible():
    keys = ("order_id",)
    widened = classify(query(_join(keys)), query(_join(keys, amount="double")), POSITION)
    assert one(widened, kinds.WIDEN).carried == kinds.EXACT and widened.refusal() is None
    assert [v.type for v in widened.rewrites[2].values] == ["string", "string", "double"]
    narrowed = one(classify(query(_join(keys, amount="double")), query(_join(keys)), POSITION),
                   kinds.NARROW_OR_MEANING)
    assert narrowed.carried == kinds.IMPOSSIBLE and "right.amount double -> float" in narrowed.reason
    same = classify(query(_join(keys)), query(_join(keys)), POSITION)
    assert not same.changes and [r.how for r in same.rewrites] == ["keep"]


def _tws(*variables: tuple[str, str], keys=("user_id",)):
    return OperatorShape(0, "transformWithStateExec", "tws", tuple(Column(k, "string") for k in keys),
                         values=tuple(Column(n, t) for n, t in variables))


def test_14_and_15_transform_with_state_variables():
    added = classify(query(_tws(("count", "ValueState"))), query(_tws(("count", "ValueState"), ("seen", "ListState"))),
                     POSITION)
    change = one(added, kinds.TWS_VARIABLES)  # the new variable starts empty for the keys seen before
    assert change.carried == kinds.PARTIAL and change.boundary and "(seen) added" in change.reason
    assert "rename" not in change.reason and "not rewrite" in added.refusal()
    removed = classify(query(_tws(("count", "ValueState"), ("seen", "ListState"))), query(_tws(("count", "ValueState"))),
                       POSITION)
    assert one(removed, kinds.TWS_VARIABLES).carried == kinds.NATIVE
    swapped = classify(query(_tws(("count", "ValueState"))), query(_tws(("total", "ValueState"))), POSITION)
    assert [c.carried for c in swapped.changes] == [kinds.NATIVE, kinds.PARTIAL]
    assert "if count -> total is a rename, that state would be lost" in swapped.changes[1].reason
    retyped = classify(query(_tws(("count", "ValueState"))), query(_tws(("count", "ListState"))), POSITION)
    change = one(retyped, kinds.TWS_REWRITE)
    assert change.carried == kinds.EXACT and not change.runnable
    assert "does not rewrite" in retyped.refusal()


def test_16_a_stored_value_that_now_means_something_else_is_impossible():
    found = classify(query(windows(COUNT, HI)), query(windows(COUNT, replace(LO, output="hi"))), POSITION)
    change = one(found, kinds.NARROW_OR_MEANING)
    assert change.carried == kinds.IMPOSSIBLE and "hi was max(value), now min(value)" in change.reason


def test_every_kind_has_a_test_and_a_migration_reads_back_as_it_was_written():
    import sys

    names = " ".join(name for name in dir(sys.modules[__name__]) if name.startswith("test_"))
    assert all(f"_{n}_" in names or f"_and_{n}_" in names for n in range(1, 17)), names
    found = classify(query(windows(COUNT, HI), dedup("event_id")), query(windows(COUNT, LO, HI)), POSITION)
    assert Migration.from_dict(found.to_dict()) == found
    assert QueryShape.from_list(query(windows(COUNT, AVG), _join(("order_id",))).to_list()) == \
        query(windows(COUNT, AVG), _join(("order_id",)))
