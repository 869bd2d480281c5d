"""What a planned query's state holds and means, per stateful operator (stateops.migration.shape), read from its
physical plan (stateops.jobs.runtime.state_schemas.plan_restart) and the operator metadata the planning wrote: the
one place the migration learns a query's state from Spark.

A window's length is in the plan only as the literals of the expression Spark's analyzer put in its place
(`... % 300000000) ... + 300000000`: slide, then duration, in microseconds); SLIDE and DURATION read them, and
tests/spark/test_migration.py checks it against a query's own state rows.
"""
from __future__ import annotations

import os
import re

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.operators import operator_meta
from stateops.checkpoints.profile import kind_of
from stateops.durations import parse_seconds
from stateops.migration.shape import Aggregate, Column, OperatorShape, QueryShape, Window

_EXPR_ID = re.compile(r"#\d+L?")
_SAVES = ("StateStoreSaveExec", "SessionWindowStateStoreSaveExec")
_DEDUPS = ("StreamingDeduplicateExec", "StreamingDeduplicateWithinWatermarkExec")
_JOIN = "StreamingSymmetricHashJoinExec"
_GROUPED = ("TransformWithStateExec", "TransformWithStateInPySparkExec", "FlatMapGroupsWithStateExec",
            "FlatMapGroupsInPandasWithStateExec")
# a window's slide (the modulus) and duration (added to the start for the end) in its analysed expression; a session
# window's gap (added to the event time for the end)
SLIDE = re.compile(r"% (\d+)\)")
DURATION = re.compile(r"\+ (\d+)\), LongType, TimestampType\)")
SESSION_GAP = re.compile(r"\+ ((?:\d+ [a-z]+ ?)+), TimestampType, LongType\)")


def _seq(items) -> list:
    return [items.apply(i) for i in range(items.size())]


def _plain(expression) -> str:
    return _EXPR_ID.sub("", expression.toString())


def _columns(attributes) -> tuple[Column, ...]:
    return tuple(Column(a.name(), a.dataType().simpleString()) for a in _seq(attributes))


def _nodes(plan):
    pending = [plan]
    while pending:
        node = pending.pop()
        yield node
        pending.extend(_seq(node.children()))


def _below(node, test):
    """The nearest node under `node` (breadth first) for which `test(node)` holds."""
    pending = _seq(node.children())
    while pending:
        current = pending.pop(0)
        if test(current):
            return current
        pending.extend(_seq(current.children()))
    return None


def _window(node, name: str) -> Window | None:
    """The window the key column `name` is computed as, from the projection under `node` that makes it."""
    for current in _nodes(node):
        kind = current.getClass().getSimpleName()
        if kind == "ProjectExec":
            texts = [e.toString() for e in _seq(current.projectList())]
            texts = [t for t in texts if t.endswith(f" AS {name}") or f" AS {name}#" in t]
        elif kind == "ExpandExec" and name in [a.name() for a in _seq(current.output())]:
            texts = [e.toString() for p in _seq(current.projections()) for e in _seq(p)]  # a sliding window's
        else:
            continue
        for text in texts:
            slide, durations = SLIDE.search(text), DURATION.findall(text)
            if slide and durations:
                return Window(max(int(d) for d in durations), int(slide.group(1)))
    return None


def _session(node) -> Window | None:
    for current in _nodes(node):
        found = SESSION_GAP.search(current.toString())
        if found:
            gap = int(parse_seconds(found.group(1).strip()) * 1_000_000)
            return Window(gap, gap, session=True)
    return None


def _aggregates(save) -> tuple[Aggregate, ...]:
    """The aggregates whose buffers `save` stores, in their order, with the output names the final aggregate above
    gives them (found by the plain function text)."""
    partial = _below(save, lambda n: n.getClass().getSimpleName().endswith("AggregateExec"))
    if partial is None:
        return ()
    found = []
    for expression in _seq(partial.aggregateExpressions()):
        function = expression.aggregateFunction()
        initial = ()
        if hasattr(function, "initialValues"):
            try:
                initial = tuple(v.sql() for v in _seq(function.initialValues()))
            except Exception:  # noqa: BLE001 - an imperative aggregate has none
                initial = ()
        found.append(Aggregate(_plain(function), function.prettyName(),
                               tuple(_plain(c) for c in _seq(function.children())),
                               _columns(function.aggBufferAttributes()), None, initial))
    return tuple(found)


def _outputs(plan, aggregates: tuple[Aggregate, ...]) -> tuple[Aggregate, ...]:
    """Each aggregate with the name the query's output gives it, read from the final aggregate's result
    expressions (`max(value)#12 AS hi#7`)."""
    names: dict[str, list[str]] = {}
    for node in _nodes(plan):
        if node.getClass().getSimpleName().endswith("AggregateExec"):
            for expression in _seq(node.resultExpressions()):
                text = _plain(expression)
                if " AS " in text:
                    computed, alias = text.rsplit(" AS ", 1)
                    names.setdefault(computed, []).append(alias)
    out = []
    for aggregate in aggregates:
        aliases = names.get(aggregate.function) or []
        out.append(Aggregate(aggregate.function, aggregate.name, aggregate.inputs, aggregate.buffer,
                             aliases.pop(0) if aliases else None, aggregate.initial))
    return tuple(out)


def _variables(meta) -> tuple[Column, ...]:
    variables = (meta.properties or {}).get("stateVariables", []) if meta else []
    return tuple(Column(v["stateName"], str(v.get("stateVariableType", ""))) for v in variables
                 if isinstance(v, dict) and not str(v.get("stateName", "")).startswith("$"))


def shapes(planned, state_dir: str) -> QueryShape:
    """Every stateful operator of `planned` (a physical plan of plan_restart, whose state folder `state_dir` holds
    the operator metadata the planning wrote)."""
    checkpoint = Checkpoint(os.path.dirname(state_dir))
    found = []
    for node in _nodes(planned):
        kind = node.getClass().getSimpleName()
        if kind not in (*_SAVES, *_DEDUPS, _JOIN, *_GROUPED):
            continue
        op = int(node.stateInfo().get().operatorId())
        meta = operator_meta(checkpoint, op)
        name = meta.operator_name if meta else kind
        stores = tuple(s for s, _ in meta.stores) if meta else ("default",)
        common = dict(operator_id=op, operator_name=name, kind=kind_of(name), stores=stores)
        if kind in _SAVES:
            keys = _columns(node.keyExpressions())
            window_column = next((c.name for c in keys if c.type.startswith("struct<start:")), None)
            window = _session(node) if kind == "SessionWindowStateStoreSaveExec" else (
                _window(node, window_column) if window_column else None)
            found.append(OperatorShape(**common, keys=keys, window=window, window_column=window_column,
                                       aggregates=_outputs(planned, _aggregates(node))))
        elif kind in _DEDUPS:
            found.append(OperatorShape(**common, keys=_columns(node.keyExpressions())))
        elif kind == _JOIN:
            left, right = ([_plain(k) for k in _seq(keys)] for keys in (node.leftKeys(), node.rightKeys()))
            values = tuple(Column(f"{side}.{c.name}", c.type) for side, child in (("left", node.left()),
                                                                                  ("right", node.right()))
                           for c in _columns(child.output()))
            found.append(OperatorShape(**common, keys=(), values=values, join_type=node.joinType().toString(),
                                       join_keys=(tuple(left), tuple(right))))
        else:
            found.append(OperatorShape(**common, keys=_columns(node.groupingAttributes()), values=_variables(meta)))
    return QueryShape(tuple(sorted(found, key=lambda o: o.operator_id)))
