"""Admission of a saved plan's items against the plan made now (stateops/retention/admission.py), on
constructed plans: the oracle is the fresh plan itself, written out by hand."""
from __future__ import annotations

import pytest

from stateops.retention.admission import Admission, NotPlanned
from stateops.retention.model import Item, Plan

pytestmark = pytest.mark.unit

CP = "/home/checkpoints/alpha"
ORPHAN = "/home/checkpoints/retired"
DEAD = "/home/tables/alpha_deadletter"


def _item(item_id: str, rule: str, action: str, target: str, job: str | None = "alpha", **fields) -> Item:
    return Item(item_id=item_id, rule=rule, action=action, job=job, target=target, bytes=fields.pop("bytes", 0),
                files=fields.pop("files", 0), reason="r", **fields)


def _fresh() -> Plan:
    items = (
        _item("r0001", "checkpoint_history", "delete_files", CP, paths=(("state/0/1.delta", 10), ("offsets/1", 5)),
              bytes=15, files=2),
        _item("r0002", "orphan_checkpoint", "delete_tree", ORPHAN, job=None, bytes=300, files=3,
              details={"last_modified": 1000.0, "bytes_moved": 0, "files_moved": 0}),
        _item("r0003", "ops_vacuum", "vacuum", DEAD),
        _item("r0004", "ops_compact", "compact", DEAD),
        _item("r0005", "deadletter_retention", "drop_rows", DEAD,
              details={"rows": 4, "cutoff": "2026-11-20T00:00:00+00:00", "column": "recorded_at"}),
    )
    skipped = ({"target": "/home/checkpoints/beta", "job": "beta", "reason": "2 temp file(s) kept: the lease is held"},)
    return Plan("p-now", "2026-11-25T00:00:00+00:00", "/home", ("/home",), items, skipped=skipped)


def test_files_are_narrowed_to_what_both_plans_list_at_the_same_size():
    admission = Admission(_fresh())
    asked = _item("x", "checkpoint_history", "delete_files", CP,
                  paths=(("state/0/1.delta", 10), ("offsets/1", 6), ("commits/9", 4)))
    got = admission.admit(asked)
    assert got.item_id == "x" and got.paths == (("state/0/1.delta", 10),) and (got.bytes, got.files) == (10, 1)
    with pytest.raises(NotPlanned, match="more than once"):
        admission.admit(asked)
    with pytest.raises(NotPlanned, match="none of the 1 file"):
        Admission(_fresh()).admit(_item("y", "checkpoint_history", "delete_files", CP, paths=(("commits/9", 4),)))


def test_a_target_rule_or_job_the_planner_does_not_pair_is_refused_with_what_it_plans():
    admission = Admission(_fresh())
    with pytest.raises(NotPlanned, match="plans deadletter_retention/drop_rows, ops_compact/compact, "
                                         "ops_vacuum/vacuum for /home/tables/alpha_deadletter now, "
                                         "not orphan_checkpoint/delete_tree"):
        admission.admit(_item("x", "orphan_checkpoint", "delete_tree", DEAD, job=None))
    with pytest.raises(NotPlanned, match="not orphan_checkpoint/delete_tree for job alpha"):
        admission.admit(_item("x", "orphan_checkpoint", "delete_tree", ORPHAN, job="alpha", bytes=300, files=3))
    with pytest.raises(NotPlanned, match="would not plan temp_files/delete_files of /home/checkpoints/beta now: "
                                         "2 temp file.s. kept: the lease is held"):
        admission.admit(_item("x", "temp_files", "delete_files", "/home/checkpoints/beta", job="beta"))
    with pytest.raises(NotPlanned, match="no rule of the current policy selects it"):
        admission.admit(_item("x", "orphan_checkpoint", "delete_tree", "/home/tables/alpha", job=None))
    with pytest.raises(NotPlanned):  # the same target spelled otherwise is not the same request
        admission.admit(_item("x", "orphan_checkpoint", "delete_tree", "/home/checkpoints/../checkpoints/retired",
                              job=None, bytes=300, files=3))


def test_a_tree_is_deleted_only_as_the_plan_saw_it():
    seen = {"last_modified": 1000.0, "bytes_moved": 0, "files_moved": 0}
    got = Admission(_fresh()).admit(_item("x", "orphan_checkpoint", "delete_tree", ORPHAN, job=None, bytes=300,
                                          files=3, details=seen))
    assert (got.item_id, got.target, got.bytes) == ("x", ORPHAN, 300)
    for changed in ({"bytes": 200}, {"files": 2}, {"details": {**seen, "last_modified": 900.0}}):
        fields = {"bytes": 300, "files": 3, "details": seen, **changed}
        with pytest.raises(NotPlanned, match="changed since the plan"):
            Admission(_fresh()).admit(_item("x", "orphan_checkpoint", "delete_tree", ORPHAN, job=None, **fields))


def test_rows_go_before_the_earlier_cutoff_on_the_fresh_column():
    def asked(cutoff, column="recorded_at"):
        return _item("x", "deadletter_retention", "drop_rows", DEAD,
                     details={"rows": 99, "cutoff": cutoff, "column": column})

    later = Admission(_fresh()).admit(asked("2999-01-01T00:00:00+00:00", column="batch_id"))
    assert later.details == {"rows": 4, "cutoff": "2026-11-20T00:00:00+00:00", "column": "recorded_at"}
    earlier = Admission(_fresh()).admit(asked("2026-11-01T00:00:00+00:00"))
    assert earlier.details["cutoff"] == "2026-11-01T00:00:00+00:00"
    for bad in ("2026-11-01T00:00:00", "yesterday"):
        with pytest.raises(NotPlanned, match="no valid cutoff"):
            Admission(_fresh()).admit(asked(bad))


def test_items_run_in_the_fresh_plans_order_unknown_ones_last():
    admission = Admission(_fresh())
    saved = [_item("a", "ops_compact", "compact", DEAD), _item("b", "nothing", "delete_tree", "/x"),
             _item("c", "ops_vacuum", "vacuum", DEAD)]
    assert [i.item_id for i in admission.order(tuple(saved))] == ["c", "a", "b"]


def test_an_orphan_goes_to_the_archive_the_plan_named_if_the_planner_would_put_it_there():
    root = "/home/ops/_orphans/archives"
    seen = {"last_modified": 1000.0, "bytes_moved": 300, "files_moved": 3}
    fresh = Plan("p", "t", "/home", ("/home",), (
        _item("r1", "orphan_checkpoint", "archive_tree", ORPHAN, job=None,
              details={**seen, "archive_id": "orphan-retired-20261125T120000Z",
                       "destination": f"{root}/orphan-retired-20261125T120000Z"}),))

    def asked(destination, archive_id):
        return _item("x", "orphan_checkpoint", "archive_tree", ORPHAN, job=None,
                     details={**seen, "archive_id": archive_id, "destination": destination})

    got = Admission(fresh).admit(asked(f"{root}/orphan-retired-20261124T000000Z", "orphan-retired-20261124T000000Z"))
    assert got.details["destination"] == f"{root}/orphan-retired-20261124T000000Z"
    for destination, archive_id in ((f"/home/tables/alpha", "alpha"), (f"{root}/a/b", "a/b"),
                                    (f"{root}/one", "other")):
        with pytest.raises(NotPlanned, match="not an archive folder the plan command would choose"):
            Admission(fresh).admit(asked(destination, archive_id))
