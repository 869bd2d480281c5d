"""The support matrix (issue 51) on checkpoints written by plain PySpark queries (tests/support/store_matrix.py): for
every store and format Spark 4.2 writes, each capability either works, checked against Spark's state reader or the
file system, or is refused before anything changes, in one line with its fix:
- the deep audit lists every operator Spark's `state-metadata` lists and reads each store's rows per partition as
  Spark's state reader does; the fast audit reads the same operators from the files alone (the skew and growth
  signals are these audits' findings);
- a rewind loads the state of the batch it cut back to, and the replay rebuilds the uncut state;
- retention's history removed leaves the latest batch's state readable (format 2: left alone, said so);
- the offline repartition keeps every row, or is refused first (the in-memory store, join format 4, format 2);
- explain-key finds a key where the reader holds it, with its change feed where the store keeps one;
- `jobs check` fits the cell's own query and refuses a changed one (a join keyed on another column included);
- the home move's rewrite leaves the same state and no file read again;
- the commit points are created once on every store.
The adopted-job capabilities (run, audits, retention, explain-key, runbooks end to end) on the default store:
test_adoption; the in-memory store's run, rewind, rebuild and move: test_state_store."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from stateops.audit import deep_audit, fast_audit
from stateops.audit.context import build_context
from stateops.audit.deep import store_refs
from stateops.audit.thresholds import Thresholds
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints import restart
from stateops.checkpoints.listing import Tree, read_many
from stateops.control.fence.session import CHECKPOINT_FILE_MANAGER, CHECKPOINT_FILE_MANAGER_KEY
from stateops.explain import explain_key
from stateops.explain.model import ExplainTarget, JoinSpec
from stateops.jobs.definition.spec import InputSpec, JobSpec
from stateops.jobs.runtime.compatibility import COMPATIBLE, REFUSED, check_state
from stateops.joins import JoinBound
from stateops.layout import Layout
from stateops.checkpoints import rewind
from stateops.recovery.model import RecoveryRefused
from stateops.recovery.preflight import check_store
from stateops.checkpoints.source_log import SOURCE_LOG
from stateops.relocation.rewrite import pairs, rewrite_source_log
from stateops.checkpoints.sparkstate import reading_format
from stateops.checkpoints.state_store import CHANGELOG

from tests.support.audit_queries import EVENTS_SCHEMA, nonzero, oracle_rows, run_bounded, state_rows, with_conf
from tests.support.store_matrix import CELLS, CHANGED, KINDS, RUN, join
from tests.support.trees import file_hashes

pytestmark = pytest.mark.spark



@pytest.mark.parametrize("cell", RUN)
def test_the_deep_audit_reads_every_operator_as_the_state_reader_does(spark, matrix, cell):
    checkpoint = matrix[cell]
    opened = Checkpoint.open(checkpoint)
    # Spark's readers, told the checkpoint's format (a format-2 checkpoint read as format 1 lists nothing)
    def own_format():
        return reading_format(spark, opened.checkpoint_format(opened.latest_committed_batch()))

    with own_format():
        listed = {row.operatorId for row in spark.read.format("state-metadata").load(checkpoint).collect()}
    assert listed and listed == set(opened.operator_ids()), cell
    report = deep_audit(spark, checkpoint)
    assert {op.operator_id for op in report.operators} == listed, cell
    assert not [f for f in report.findings if f.code == "STATE_UNREADABLE"], report.findings
    with own_format():
        refs = store_refs(spark, build_context(checkpoint, None, Thresholds()))
    by_store = {(op.operator_id, op.store_name): op for op in report.operators}
    assert set(by_store) == {(r.operator_id, r.store_name) for r in refs}
    for ref in refs:
        op = by_store[(ref.operator_id, ref.store_name)]
        with own_format():
            expected = oracle_rows(spark, checkpoint, **dict(ref.options))
        assert nonzero(op.rows_per_partition) == expected, (cell, ref)
        assert op.rows_total == sum(expected.values()) > 0, (cell, ref)

    fast = fast_audit(checkpoint)
    assert {op.operator_id for op in fast.operators} == listed, cell
    assert sum(op.bytes_total for op in fast.operators) > 0


# ----- the capabilities that read or change a checkpoint's files, per cell -----

# Cells whose state holds processing times (a TTL's expiry, timers): a replay writes other times, so their state is
# compared by rows per store, not row by row.
PROCESSING_TIME = ("tws", "format2_tws")


def _copy(checkpoint: str, tmp_path) -> str:
    target = str(tmp_path / "cp")
    shutil.copytree(checkpoint, target)
    return target


def _same_state(cell: str, got: dict, expected: dict) -> None:
    if cell in PROCESSING_TIME:
        got, expected = ({k: len(v) for k, v in s.items()} for s in (got, expected))
    assert got == expected, cell


def _restart(spark, matrix_root: str, cell: str, checkpoint: str) -> None:
    """The cell's own plain query started again on `checkpoint` (availableNow: whatever input it has not read)."""
    settings, query = CELLS[cell]
    frame, mode = query(spark, Path(matrix_root) / "input")
    with_conf(spark, settings, lambda: run_bounded(frame, checkpoint, mode))


def _files(checkpoint: str, batch: int) -> restart.CheckpointFiles:
    """The checkpoint's files as retention reads them, the snapshots a restart from `batch` loads read too."""
    files = restart.parse(Tree.list(checkpoint), read_many)
    restart.load_references(files, read_many, lambda store: store.base(batch + 1))
    return files


def _format2(checkpoint: str) -> bool:
    opened = Checkpoint.open(checkpoint)
    return opened.checkpoint_format(opened.latest_committed_batch()) == 2


@pytest.mark.parametrize("cell", RUN)
def test_rewind_loads_the_earlier_state_and_the_replay_rebuilds_the_same_or_is_refused_first(
        spark, matrix, cell, tmp_path):
    """A rewind cuts the checkpoint back to batch 1: Spark's reader then reads there the state it read at batch 1
    before the cut, and the restart replays the files of the cut batches into the state it had (the oracle: the
    uncut checkpoint). Checkpoint format 2 is refused first, in one line, nothing changed."""
    copy = _copy(matrix[cell], tmp_path)
    before = file_hashes(copy)
    if _format2(copy):
        with pytest.raises(RecoveryRefused, match="cannot rewind a checkpoint in format 2") as refused:
            check_store(cell, copy, "rewind")
        assert "\n" not in str(refused.value) and "Fix:" in str(refused.value)
        assert file_hashes(copy) == before
        return
    assert rewind.rewind_problems(Checkpoint.open(copy), 1) == []
    rewind.rewind(copy, 1)
    assert Checkpoint.open(copy).latest_committed_batch() == 1
    _same_state(cell, state_rows(spark, copy), state_rows(spark, matrix[cell], 1))
    _restart(spark, os.path.dirname(os.path.dirname(matrix[cell])), cell, copy)
    _same_state(cell, state_rows(spark, copy), state_rows(spark, matrix[cell]))


@pytest.mark.parametrize("cell", RUN)
def test_retention_removes_only_what_a_restart_from_the_latest_batch_does_not_read(spark, matrix, cell, tmp_path):
    """Retention's history at the latest batch (every batch before it given up), removed from a copy: Spark's reader
    still loads the latest batch's state (the version a restart loads) as before. Format 2's files are left alone,
    said so."""
    copy = _copy(matrix[cell], tmp_path)
    latest = Checkpoint.open(copy).latest_committed_batch()
    expected = state_rows(spark, copy)
    history = restart.history(_files(copy, latest), latest, live=False)
    if _format2(copy):
        assert any("checkpoint format v2" in p for p in history.problems), history
        assert not (history.state or history.logs or history.unreferenced)
        return
    assert history.problems == () and history.logs, history
    gone = [*history.state, *history.logs, *history.unreferenced, *history.temp]
    for rel in gone:
        os.remove(os.path.join(copy, rel))
    assert latest in _files(copy, latest).restorable_batches()
    _same_state(cell, state_rows(spark, copy), expected)


# Spark's offline repartition reads RocksDB only (it fails after writing the next offsets/N), rewrites a join in
# state format 4 into state its reader cannot read (measured), and the runbook does not rewrite format 2 by version.
REPARTITION_REFUSED = ("memory", "memory_sessions", "memory_join2", "pandas_state", "join4", "format2_changelog",
                       "format2_zip", "format2_join4", "format2_tws")


@pytest.mark.parametrize("cell", RUN)
def test_the_offline_repartition_keeps_every_row_or_is_refused_first(spark, matrix, cell, tmp_path):
    """Spark's offline repartition (the runbook's `repartition`) to more partitions: every row kept, each read
    from the new partitions. Where the runbook refuses the cell, it does so before anything changes."""
    copy = _copy(matrix[cell], tmp_path)
    before = file_hashes(copy)
    expected = state_rows(spark, copy, by_partition=False)
    try:
        check_store(cell, copy, "repartition")
    except RecoveryRefused as refused:
        assert cell in REPARTITION_REFUSED and "\n" not in str(refused) and "Fix:" in str(refused), refused
        assert file_hashes(copy) == before
        return
    assert cell not in REPARTITION_REFUSED
    partitions = max(Checkpoint.open(copy).state_partitions(Checkpoint.open(copy).latest_committed_batch()).values())
    spark._streamingCheckpointManager.repartition(copy, partitions + 2)
    opened = Checkpoint.open(copy)
    assert max(opened.state_partitions(opened.latest_committed_batch()).values()) == partitions + 2
    _same_state(cell, state_rows(spark, copy, by_partition=False), expected)


def _explain_target(cell: str, checkpoint: str) -> ExplainTarget:
    query = CELLS[cell][1]
    if query is join:  # the matrix's join: left_time <= right_time <= left_time + 5 minutes
        spec = JoinSpec("left", "right", "left_time", "right_time", JoinBound(lower_seconds=0, upper_seconds=300))
        return ExplainTarget(cell, checkpoint, kind="join", join=spec)
    return ExplainTarget(cell, checkpoint, kind=KINDS.get(query, "window"))


TIME = re.compile(r"^\d{4}-\d\d-\d\dT")


def _leaves(value) -> list:
    return [leaf for item in value.values() for leaf in _leaves(item)] if isinstance(value, dict) else [value]


def _a_key(state: dict) -> str:
    """A key the state holds: the hot user where the state is per user, else the first row's first text key field
    (a user, an event id; not a window's time, which the reader's JSON writes in another form than a key's text)."""
    keys = [json.loads(row)["key"] for rows in state.values() for _, row in rows]
    if any(key.get("user_id") == "hot" for key in keys):
        return "hot"
    return next(leaf for key in keys for leaf in _leaves(key) if isinstance(leaf, str) and not TIME.match(leaf))


def _holds(row: str, key: str) -> bool:
    return key in {str(leaf) for leaf in _leaves(json.loads(row)["key"])}


@pytest.mark.parametrize("cell", RUN)
def test_explain_key_finds_the_key_where_the_state_reader_holds_it(spark, matrix, cell):
    """explain-key on a key the state holds: the operators and partitions it names are those where Spark's state
    reader has the key; its change feed has the key's history where the store keeps one (changelog checkpointing or
    the in-memory store), and says why not otherwise."""
    checkpoint = matrix[cell]
    state = state_rows(spark, checkpoint)
    key = _a_key(state)
    found = explain_key(spark, _explain_target(cell, checkpoint), key)
    expected = {(op, partition) for (op, store), rows in state.items() for partition, row in rows
                if _holds(row, key) and not store.endswith("keyToNumValues")}
    assert {(r["operator_id"], r["partition_id"]) for r in found.in_state} == expected and expected, (cell, key)
    assert found.reason and found.explanation
    zip_only = CELLS[cell][0].get(CHANGELOG) == "false"
    assert ("error" in found.change_feed) == zip_only, found.change_feed
    assert zip_only or found.history, (cell, found.change_feed)


def _spec(cell: str, checkpoint: str, mode: str) -> JobSpec:
    keys = {"merge_keys": ("user_id",)} if mode == "update" else {"idempotent_key": ("event_id",)}
    return JobSpec(name=f"matrix_{cell}", inputs=(InputSpec("events", EVENTS_SCHEMA, "event_time"),),
                   transformation="tests.support.store_matrix:CELLS", output_mode=mode, sink_table="unused",
                   watermark_delay="10 minutes", watermark_min="1 minute", watermark_max="2 hours",
                   checkpoint=checkpoint, **keys)


@pytest.mark.parametrize("cell", RUN)
def test_jobs_check_fits_the_cells_own_query_and_refuses_a_changed_one(spark, matrix, cell, tmp_path):
    """`stateops jobs check`'s decision on each cell: its own query fits the state; a query whose state does not fit
    (another operator, or a join keyed on another column of the same type) is refused, naming the operator."""
    checkpoint, (_, query) = matrix[cell], CELLS[cell]
    folder, layout = Path(checkpoint).parent.parent / "input", Layout(str(tmp_path / "home"))
    frame, mode = query(spark, folder)
    fit = check_state(spark, _spec(cell, checkpoint, mode), layout, frame)
    assert fit.status == COMPATIBLE, fit.line()
    frame, mode = CHANGED[query](spark, folder)
    fit = check_state(spark, _spec(cell, checkpoint, mode), layout, frame)
    assert fit.status == REFUSED and fit.operator, fit.line()


@pytest.mark.parametrize("cell", RUN)
def test_a_moved_checkpoint_holds_the_same_state_and_reads_no_file_again(spark, matrix, cell, tmp_path):
    """The home move on each cell: its input and checkpoint copied to a new root and the file source's log rewritten
    as the move rewrites it (stateops.relocation.rewrite). Spark's reader reads the same state there, and the query
    restarted on the moved input reads no file again (unrewritten, it would read every file as new)."""
    old_root = Path(matrix[cell]).parent.parent
    moved = tmp_path / "moved" / "cp" / cell
    shutil.copytree(old_root / "input", tmp_path / "moved" / "input")
    shutil.copytree(matrix[cell], moved)
    mapping, rewritten = pairs(str(old_root), str(tmp_path / "moved")), 0
    for log in sorted(moved.glob("sources/*/*")):
        if SOURCE_LOG.search(str(log)):
            text, changed = rewrite_source_log(log.read_text(), mapping)
            log.write_text(text)
            rewritten += changed
    assert rewritten >= 3, rewritten  # a file a batch, three batches
    latest = Checkpoint.open(str(moved)).latest_committed_batch()
    _same_state(cell, state_rows(spark, str(moved)), state_rows(spark, matrix[cell]))
    _restart(spark, str(tmp_path / "moved"), cell, str(moved))
    assert Checkpoint.open(str(moved)).latest_committed_batch() == latest, cell


@pytest.mark.parametrize("cell", RUN)
def test_the_commit_points_of_every_store_are_created_once(spark, matrix, cell, tmp_path):
    """Every cell was written through StateOps' create-once checkpoint file manager (the session's), state files of
    every store included; a second writer of the latest batch's offsets and commit fails and changes nothing."""
    from py4j.protocol import Py4JJavaError

    assert spark.conf.get(CHECKPOINT_FILE_MANAGER_KEY) == CHECKPOINT_FILE_MANAGER
    copy = _copy(matrix[cell], tmp_path)
    latest = Checkpoint.open(copy).latest_committed_batch()
    jvm = spark._jvm
    manager = jvm.io.stateops.fence.CreateOnceCheckpointFileManager(
        jvm.org.apache.hadoop.fs.Path(f"file://{copy}"), spark._jsc.hadoopConfiguration())
    before = file_hashes(copy)
    for rel in (f"offsets/{latest}", f"commits/{latest}"):
        out = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(f"file://{copy}/{rel}"), False)
        out.write(bytearray(b"v1\n{}"))
        with pytest.raises(Py4JJavaError, match="already exists: another writer created it first"):
            out.close()
    assert file_hashes(copy) == before
