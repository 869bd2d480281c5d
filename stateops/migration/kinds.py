"""The kinds of change to a stateful query, and how each is carried into the new query's state (the 16 kinds of
../shared/reviews/MIGRATION-NOTES.md §4, by the names `recover plan --mode migrate --json` gives them).

- native: Spark takes the old state as it is and it keeps its meaning; nothing is rewritten;
- exact: the state is rewritten and loses nothing;
- partial: rewritten, and the new part is complete only from a boundary (the batch and watermark named);
- impossible: the information was never stored; refused, the fix named.
"""
from __future__ import annotations

NATIVE, EXACT, PARTIAL, IMPOSSIBLE = "native", "exact", "partial", "impossible"
CARRIED = (NATIVE, EXACT, PARTIAL, IMPOSSIBLE)  # from the best to the worst

RENAME = "rename"                        # 1: an output column renamed (the state holds no output names)
REORDER = "reorder"                      # 2: same-typed values stored in another order
WIDEN = "widen"                          # 3: a value's type widened (int -> bigint, float -> double)
REMOVE_AGGREGATE = "remove_aggregate"    # 4
ADD_AGGREGATE = "add_aggregate"          # 5: exact when the old buffers hold it, else partial
COARSER_KEY = "coarser_key"              # 6: a grouping or dedup column dropped; the old keys' buffers merged
FINER_KEY = "finer_key"                  # 7: a key column the state never held
WINDOW_MULTIPLE = "window_multiple"      # 8: a tumbling window lengthened to a multiple of its length
WINDOW_CHANGE = "window_change"          # 9: any other window change (finer, not a multiple, sliding, session gap)
WATERMARK = "watermark"                  # 10: the watermark delay
ADD_OPERATOR = "add_operator"            # 11: a stateful operator added (e.g. a dedup before the aggregation)
REMOVE_OPERATOR = "remove_operator"      # 12
JOIN_KEY = "join_key"                    # 13: a join re-keyed
TWS_VARIABLES = "tws_variables"          # 14: transformWithState variables added or removed
TWS_REWRITE = "tws_rewrite"              # 15: transformWithState key, variable rename or type
NARROW_OR_MEANING = "narrow_or_meaning"  # 16: a type narrowed, or a stored value's meaning changed (max -> min)

KINDS = (RENAME, REORDER, WIDEN, REMOVE_AGGREGATE, ADD_AGGREGATE, COARSER_KEY, FINER_KEY, WINDOW_MULTIPLE,
         WINDOW_CHANGE, WATERMARK, ADD_OPERATOR, REMOVE_OPERATOR, JOIN_KEY, TWS_VARIABLES, TWS_REWRITE,
         NARROW_OR_MEANING)

# Aggregates whose buffers merge by a plain aggregate of each buffer field (Spark's mergeExpressions for them):
# what a coarser key or a longer window needs. Others (first, last, percentiles, collect_list, stddev's moments)
# keep order or a form no column aggregate merges.
MERGE = {"count": ("sum",), "sum": ("sum",), "max": ("max",), "min": ("min",), "avg": ("sum", "sum"),
         "mean": ("sum", "sum"), "bool_and": ("min",), "bool_or": ("max",), "every": ("min",), "some": ("max",),
         "any": ("max",)}

# Types by the values each holds exactly: a cast along an arrow loses nothing.
WIDENS = {"tinyint": ("smallint", "int", "bigint", "float", "double"), "smallint": ("int", "bigint", "float", "double"),
          "int": ("bigint", "double"), "bigint": (), "float": ("double",), "date": ("timestamp",)}


def widens(old: str, new: str) -> bool:
    """Whether every value of type `old` is a value of `new` (a cast loses nothing)."""
    return new in WIDENS.get(old, ())


def worst(carried: list[str]) -> str:
    return max(carried, key=CARRIED.index, default=NATIVE)
