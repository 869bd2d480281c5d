"""The runbook's archives and journal on an S3 home, against moto's S3 server on loopback (its own process; no
mocks): server-side copies checked by the API calls the client sent, manifests against sha256 of the objects as
boto3 reads them, copy+verify+delete where a local disk renames, the journal as conditionally created objects
(order, a second writer refused, a killed runbook's journal resumed), every key under the test's prefix."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from stateops.storage import copies
from stateops.storage import filesystem
from stateops.layout import Layout
from stateops.checkpoints import archive
from stateops.recovery.journal import recovery_journal
from stateops.runbooks import RunbookBusy, read_entries, running
from stateops.cli.main import main
from tests.support.fake_checkpoint import FakeCheckpoint

pytestmark = pytest.mark.e2e

JOB = "user_activity"


def _upload_checkpoint(s3, tmp_path, url: str) -> dict[str, str]:
    """A small checkpoint (fake_checkpoint: logs, RocksDB state, crc files) put under `url` with boto3;
    returns sha256 of each object by relative path, read back with boto3."""
    local = FakeCheckpoint.build(tmp_path / "local-cp", batches=range(4), partitions=2, crc=True,
                                 stores=[dict(op=0, partitions=2, changelog=range(1, 5), zip={2: ["a.sst"]})])
    prefix = url.removeprefix(f"s3://{s3.bucket}/")
    sums = {}
    for rel in sorted(local.files()):
        s3.put_object(Bucket=s3.bucket, Key=f"{prefix}/{rel}", Body=(tmp_path / "local-cp" / rel).read_bytes())
        body = s3.get_object(Bucket=s3.bucket, Key=f"{prefix}/{rel}")["Body"].read()
        sums[rel] = hashlib.sha256(body).hexdigest()
    return sums


def _keys_under(s3, url: str) -> list[str]:
    prefix = url.removeprefix(f"s3://{s3.bucket}/").rstrip("/") + "/"
    return [k["Key"] for k in s3.list_objects_v2(Bucket=s3.bucket, Prefix=prefix).get("Contents", [])]


def test_an_archive_is_copied_by_the_server_and_its_manifest_sums_the_source_objects(s3_homes_client, s3_home_url,
                                                                                     tmp_path, s3_calls):
    s3, home, calls = s3_homes_client, s3_home_url, s3_calls
    source, copy = f"{home}/checkpoints/{JOB}", f"{home}/ops/{JOB}/archives/rb/checkpoint"
    sums = _upload_checkpoint(s3, tmp_path, source)
    for marker in ("", "offsets/"):  # Hadoop S3A's directory markers: empty keys ending in /, no files
        s3.put_object(Bucket=s3.bucket, Key=f"{source.removeprefix(f's3://{s3.bucket}/')}/{marker}", Body=b"")
    calls.clear()
    entries = copies.copy_tree(source, copy)
    assert {e.path: e.sha256 for e in entries} == sums
    copied = [key for op, key in calls if op == "CopyObject"]
    assert len(copied) == len(sums), "one server-side CopyObject per file"
    written = [(op, key) for op, key in calls if op in ("PutObject", "UploadPart", "CreateMultipartUpload")]
    assert written == [], f"checkpoint bytes went through the client: {written}"
    read = [key for op, key in calls if op == "GetObject"]
    assert all("/checkpoints/" in key for key in read), "only the source is read (for its sums)"

    files = [e.__dict__ for e in entries]
    assert copies.verify_tree(copy, files) == []
    bucket_key = copy.removeprefix(f"s3://{s3.bucket}/")
    s3.put_object(Bucket=s3.bucket, Key=f"{bucket_key}/offsets/1", Body=b"v1\n{changed}")
    s3.delete_object(Bucket=s3.bucket, Key=f"{bucket_key}/metadata")
    filesystem(copy)[0].invalidate_cache()
    problems = copies.verify_tree(copy, files)
    assert problems[0] == "missing metadata"
    assert problems[1].startswith("offsets/1: 12 bytes sha256") and "manifest says" in problems[1]


@pytest.mark.long  # the default run: the archive copied by the server with its manifest's sums (above); the copy's verification on local disk (test_recovery)
def test_a_rename_on_s3_is_a_server_side_copy_verified_before_the_source_is_removed(s3_homes_client, s3_home_url,
                                                                                    tmp_path, s3_calls):
    s3, home, calls = s3_homes_client, s3_home_url, s3_calls
    source, root = f"{home}/checkpoints/{JOB}", f"{home}/ops/{JOB}/archives"
    sums = _upload_checkpoint(s3, tmp_path, source)
    assert copies.same_filesystem(source, root)  # the preflight plans method "rename" for rebuild/restore
    assert not copies.same_filesystem(source, str(tmp_path))
    files = [e.__dict__ for e in copies.listing(source)]
    runbook = "user_activity-20260101T000000Z-abcdef"
    archive.write_json(f"{archive.runbook_dir(root, runbook)}/{archive.MANIFEST}", {"files": files})
    archived = f"{archive.runbook_dir(root, runbook)}/{archive.CHECKPOINT}"
    calls.clear()
    copies.move_tree(source, archived)
    moved = list(calls)
    assert _keys_under(s3, source) == []
    assert archive.verify(root, runbook) == []
    assert not [key for op, key in moved if op in ("PutObject", "UploadPart")]
    copied = {key for op, key in moved if op == "CopyObject"}
    assert len(copied) == len(sums) and all("/archives/" in key for key in copied)
    last_read_of_copy = max(i for i, (op, key) in enumerate(moved) if op == "GetObject" and "/archives/" in key)
    first_delete = next(i for i, (op, _) in enumerate(moved) if op.startswith("Delete"))
    assert last_read_of_copy < first_delete, "the source is removed only after its copy was read back"

    archive.copy_checkpoint_back(root, runbook, source)  # a restore / a rollback putting the archive back
    assert copies.verify_tree(source, files) == [] and archive.verify(root, runbook) == []
    assert {e.path: e.sha256 for e in copies.listing(source)} == sums
    assert _keys_under(s3, source + ".restoring") == []


def test_the_journal_on_s3_is_one_object_per_entry_read_back_in_order(s3_homes_client, s3_home_url, tmp_path):
    s3, home = s3_homes_client, s3_home_url
    layout = Layout.of(str(tmp_path / "local"))  # the actions table: not under test here
    directory = f"{home}/ops/{JOB}/archives/rb"
    first = recovery_journal(layout, JOB, "rb", directory, "me")
    with first.held():
        assert running(directory)
        with pytest.raises(RunbookBusy, match="being executed by another process"):
            with recovery_journal(layout, JOB, "rb", directory, "me").held():
                pass
        late = recovery_journal(layout, JOB, "rb", directory, "me")  # read the journal before the first wrote to it
        for step, phase in (("runbook", "started"), ("stop", "started"), ("stop", "done")):
            first.record(step, phase, {"n": len(first.entries)})
        with pytest.raises(RunbookBusy, match="has journal entry 0 written by another process"):
            late.record("runbook", "started")
    assert not running(directory)
    assert [(e["step"], e["phase"]) for e in read_entries(directory)] == [
        ("runbook", "started"), ("stop", "started"), ("stop", "done")]
    assert sorted(_keys_under(s3, directory)) == [
        f"{directory.removeprefix(f's3://{s3.bucket}/')}/journal/{n:08d}.json" for n in range(3)]
    again = recovery_journal(layout, JOB, "rb", directory, "me")
    assert again.phase("stop") == "done" and again.details("stop") == {"n": 2}


_KILLED = """
import os, signal, sys
from stateops.layout import Layout
from stateops.recovery.journal import recovery_journal
journal = recovery_journal(Layout.of(sys.argv[2]), "user_activity", sys.argv[3], sys.argv[1], "killed")
with journal.held():
    journal.record("runbook", "started", {"plan": {}})
    journal.record("stop", "started")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_runbooks_journal_on_s3_is_read_and_resumed_and_the_cli_shows_it(s3_homes_client, s3_home_url,
                                                                                  tmp_path, monkeypatch):
    s3, home = s3_homes_client, s3_home_url
    monkeypatch.setenv("STATEOPS_HOME", home)
    monkeypatch.setenv("STATEOPS_CONTROL_HOME", str(tmp_path / "ctl"))
    layout = Layout.of(home, str(tmp_path / "ctl"))
    root = f"{home}/ops/{JOB}/archives"
    runbook = "user_activity-20260101T000000Z-0a0b0c"
    directory = archive.runbook_dir(root, runbook)
    done = subprocess.run([sys.executable, "-c", _KILLED, directory, str(tmp_path / "local"), runbook],
                          cwd=os.getcwd(), capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    assert not running(directory), "its process is gone from this host: its lock is free at once, as a flock is"

    resumed = recovery_journal(layout, JOB, runbook, directory, "me")
    assert resumed.phase("stop") == "started" and resumed.phase("runbook") == "started"
    with resumed.held():  # takes over the stale lock
        assert running(directory)
        resumed.record("stop", "done", {"how": "nothing was running"})
    assert [(e["step"], e["phase"]) for e in read_entries(directory)] == [
        ("runbook", "started"), ("stop", "started"), ("stop", "done")]
    assert not running(directory)

    source = f"{home}/checkpoints/{JOB}"
    _upload_checkpoint(s3, tmp_path, source)
    files = [e.__dict__ for e in copies.copy_tree(source, f"{directory}/{archive.CHECKPOINT}")]
    archive.write_json(f"{directory}/{archive.MANIFEST}", {
        "archive_id": runbook, "job": JOB, "created_at": "2026-01-01T00:00:00+00:00", "actor": "me",
        "reason": "test", "mode": "adjust", "method": "copy", "latest_committed_batch": 3,
        "total_bytes": sum(f["size"] for f in files), "files": files})
    runner = CliRunner()
    listed = runner.invoke(main, ["archives", "list", JOB, "--json"], catch_exceptions=False)
    assert [a["archive_id"] for a in json.loads(listed.output)] == [runbook]
    shown = runner.invoke(main, ["archives", "show", runbook, "--json", "--verify"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.output)
    assert [e["phase"] for e in document["journal"]] == ["started", "started", "done"]
    assert document["verify_problems"] == []

