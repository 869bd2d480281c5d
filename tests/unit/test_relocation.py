"""A home move's pure parts (stateops.relocation): the rewrite of what names the old home (the file source's log in
Spark's own format, JSON records, the ops tables' SQL), the plan (what is copied, rewritten, left, refused), the
mark that makes a moved home refuse every command, and the placement check before a run. No JVM."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from stateops.delta import read_table
from stateops.jobs.definition.environment import Environment
from stateops.layout import Layout
from stateops.relocation import marker
from stateops.checkpoints.placement import Misplaced, check_placement
from stateops.relocation.plan import left_behind, make_plan
from stateops.checkpoints.source_log import spark_form
from stateops.relocation.rewrite import (json_column_update, pairs, path_column_update, rewrite_json,
                                         rewrite_source_log, sql_text)

pytestmark = pytest.mark.unit

LOG = ('v1\n{"path":"file:///old/home/landing/events/e-0.json","timestamp":1795778934571,"batchId":0}\n'
       '{"path":"file:///old/home2/landing/events/e-1.json","timestamp":1795778934572,"batchId":0}')


def test_the_file_source_log_keeps_spark_format_and_rewrites_only_paths_under_the_home():
    mapping = pairs("/old/home", "s3://bucket/prefix")
    text, changed = rewrite_source_log(LOG, mapping)
    lines = text.split("\n")
    assert changed == 1 and lines[0] == "v1" and len(lines) == 3
    assert lines[1] == ('{"path":"s3://bucket/prefix/landing/events/e-0.json","timestamp":1795778934571,'
                        '"batchId":0}')
    assert lines[2] == LOG.split("\n")[2]  # /old/home2 is not under /old/home
    back, _ = rewrite_source_log(text, pairs("s3://bucket/prefix", "/new/local"))
    assert back.split("\n")[1].startswith('{"path":"file:///new/local/landing/events/e-0.json"')


def test_every_form_of_the_home_is_rewritten_in_json_records():
    mapping = pairs("/old/home", "/new/home")
    record = {"checkpoint": "/old/home/checkpoints/a", "uri": "file:///old/home/tables/t", "n": 3,
              "files": [{"path": "offsets/0"}], "other": "/old/homework", "same": "/old/home"}
    assert rewrite_json(record, mapping) == {
        "checkpoint": "/new/home/checkpoints/a", "uri": "file:///new/home/tables/t", "n": 3,
        "files": [{"path": "offsets/0"}], "other": "/old/homework", "same": "/new/home"}
    assert spark_form("/a b/c") == "file:///a%20b/c"


def test_the_ops_tables_are_rewritten_by_sql_delta_rs_runs(tmp_path):
    mapping = pairs(str(tmp_path / "old"), "s3://b/p")
    uri = str(tmp_path / "audits")
    old_checkpoint = f"{tmp_path}/old/checkpoints/a"
    write_deltalake(uri, pa.table({"checkpoint": [old_checkpoint, "/elsewhere/x", None],
                                   "details_json": [json.dumps({"archive": f"{tmp_path}/old/ops/a"}), "{}", None]}))
    table = DeltaTable(uri)
    table.update(updates={"checkpoint": path_column_update("checkpoint", [old_checkpoint, "/elsewhere/x"], mapping),
                          "details_json": json_column_update("details_json", mapping)})
    rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
    assert [r["checkpoint"] for r in rows] == ["s3://b/p/checkpoints/a", "/elsewhere/x", None]
    assert json.loads(rows[0]["details_json"]) == {"archive": "s3://b/p/ops/a"}
    assert path_column_update("checkpoint", ["/elsewhere/x"], mapping) is None
    # delta-rs's UPDATE writes its files' text as string_view: the ops tables' readers still filter on it (a deep
    # audit after a move reads its history by checkpoint)
    audits = str(tmp_path / "audits2")
    write_deltalake(audits, pa.table({"checkpoint": [old_checkpoint, "/elsewhere/x"]}))
    write_deltalake(audits, pa.table({"checkpoint": ["/elsewhere/y"]}), mode="append")
    DeltaTable(audits).update(updates={"checkpoint": path_column_update("checkpoint", [old_checkpoint], mapping)},
                              predicate=f"strpos(checkpoint, {sql_text(old_checkpoint)}) > 0")
    assert read_table(audits, ["checkpoint"], [("checkpoint", "=", "s3://b/p/checkpoints/a")]).to_pylist() == [
        {"checkpoint": "s3://b/p/checkpoints/a"}]


def _home(tmp_path) -> Layout:
    layout = Layout(str(tmp_path / "home"))
    files = {"landing/events/e-0.json": "{}\n", "checkpoints/job/metadata": '{"id":"q"}',
             "checkpoints/job/sources/0/0": LOG.split("\n", 2)[0] + "\n" + LOG.split("\n")[1].replace("/old/home",
                                                                                                   layout.home),
             "checkpoints/job/.metadata.crc": "x", "checkpoints/job/sources/0/.0.crc": "x",
             "ops/job/control/lease.json": "{}", "dagster/storage/runs.db": "x",
             "ops/job/archives/r1/manifest.json": json.dumps({"checkpoint": f"{layout.home}/checkpoints/job"})}
    for rel, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(layout.home, rel)), exist_ok=True)
        with open(os.path.join(layout.home, rel), "w") as handle:
            handle.write(text)
    return layout


def test_the_plan_copies_the_home_and_says_what_it_rewrites_and_leaves(tmp_path):
    layout = _home(tmp_path)
    plan = make_plan(layout, str(tmp_path / "new"), running=[], outside=[])
    copied = {rel for rel, _ in plan.files}
    assert copied == {"landing/events/e-0.json", "checkpoints/job/metadata", "checkpoints/job/sources/0/0",
                      "checkpoints/job/.metadata.crc", "ops/job/archives/r1/manifest.json"}
    assert plan.rewrites["file source logs"] == ["checkpoints/job/sources/0/0"]
    assert plan.rewrites["JSON records"] == ["ops/job/archives/r1/manifest.json"]
    why = {path: reason for path, _size, reason in plan.skipped}
    assert set(why) == {"checkpoints/job/sources/0/.0.crc", "ops/job/control/lease.json", "dagster/storage/runs.db"}
    assert plan.refusals == [] and plan.rate_bytes_per_second
    assert "S3A reads none" in left_behind("checkpoints/job/.metadata.crc", to_bucket=True, rewritten=set())
    assert not (tmp_path / "new").exists(), "a plan writes nothing"


def test_the_plan_refuses_a_used_destination_an_overlap_a_running_job_and_a_job_outside(tmp_path):
    layout = _home(tmp_path)
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("mine")
    refusals = make_plan(layout, str(used), running=["job"], outside=["other"]).refusals
    assert any("holds 1 files already" in r for r in refusals)
    assert any(r.startswith("job is running") and "add --stop" in r for r in refusals)
    assert any(r.startswith("job other:") for r in refusals)
    assert make_plan(layout, str(tmp_path / "new"), running=["job"], outside=[], stop=True).refusals == []
    inside = make_plan(layout, os.path.join(layout.home, "sub"), running=[], outside=[]).refusals
    assert any("overlap" in r for r in inside)


def test_a_moved_home_refuses_every_entry_point_naming_the_new_one(tmp_path, monkeypatch):
    layout = _home(tmp_path)
    marker.mark(layout.home, "s3://bucket/new", "abc123", "2026-11-27T12:00:00+00:00")
    with pytest.raises(marker.HomeMovedError) as err:
        Environment.from_env(home=layout.home)
    assert str(err.value).startswith(f"STATEOPS_HOME {layout.home} was moved to s3://bucket/new at ")
    assert "Fix: set STATEOPS_HOME=s3://bucket/new" in str(err.value) and err.value.exit_code == 2
    assert Environment.from_env(home=layout.home, moved_home=True).layout.home == layout.home


def test_a_landing_moved_without_its_checkpoint_and_a_checkpoint_moved_away_are_refused(tmp_path):
    layout = _home(tmp_path)
    checkpoint = os.path.join(layout.home, "checkpoints", "job")
    check_placement("job", [checkpoint], [layout.landing("events")], layout.table("job"), by_runbook=False)
    moved = str(tmp_path / "moved")
    with pytest.raises(Misplaced, match=rf"read its input from file://{layout.home}/landing/events, but its landing "
                                        rf"is now {moved}/landing/events"):
        check_placement("job", [checkpoint], [f"{moved}/landing/events"], layout.table("job"), by_runbook=False)
    write_deltalake(layout.table("job"), pa.table({"n": [1]}))
    elsewhere = str(tmp_path / "moved-checkpoint")
    with pytest.raises(Misplaced, match="no checkpoint at .* but its table .* holds the output of an earlier one"):
        check_placement("job", [elsewhere], [], layout.table("job"), by_runbook=False)
    check_placement("job", [elsewhere], [], layout.table("job"), by_runbook=True)  # a rebuild starts over on purpose
