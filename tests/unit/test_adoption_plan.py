"""The adoption plan's decisions, without Spark (stateops.adoption): what the table holds of a batch in flight, every
refusal in one line with its fix, the checkpoint's sources matched to the job's inputs (Spark's own log format,
written here as Spark writes it)."""
from __future__ import annotations

import json
import os

import pytest

from stateops.adoption import evidence
from stateops.adoption.evidence import Batches, Sink
from stateops.adoption.plan import NOT_WRITTEN, UNKNOWN, WRITTEN, in_flight_output, refusals
from stateops.checkpoints.checkpoint import Checkpoint

pytestmark = pytest.mark.unit

DELTA = Sink("/t", delta=True, exists=True, version=5)


@pytest.mark.parametrize("batches, written, expected", [
    (Batches(3, None, 4), 3, (None, 3, None)),
    (Batches(3, 4, 5), 4, (WRITTEN, 4, None)),
    (Batches(3, 4, 5), 3, (NOT_WRITTEN, 3, None)),
    (Batches(3, 4, 5), None, (UNKNOWN, 3, None)),
])
def test_what_the_table_holds_of_the_batch_in_flight(batches, written, expected):
    sink = Sink("/t", True, True, 5, "app" if written is not None else None, written)
    assert in_flight_output(batches, sink) == expected


def test_a_table_ahead_of_its_checkpoint_is_refused():
    output, through, refusal = in_flight_output(Batches(3, None, 4), Sink("/t", True, True, 9, "q", 7))
    assert (output, through) == (None, None) and "the checkpoint is older than its table" in refusal


def _refusals(**changes):
    values = dict(batches=Batches(3, None, 4), sources=[evidence.Source(0, "files", ("/in",), "events", {})],
                  inputs=1, sink=DELTA, fit={"status": "compatible"}, output=None, replay_last_batch=False,
                  merges=True, busy=None, already=None)
    return refusals(**{**values, **changes})


def test_a_plan_with_nothing_against_it_has_no_refusal():
    assert _refusals() == []


@pytest.mark.parametrize("changes, words", [
    ({"busy": "its offset log changed"}, "another process is writing the checkpoint"),
    ({"batches": Batches(None, 0, 1)}, "no committed batch"),
    ({"fit": {"status": "refused", "operator": "operator 0", "change": "a -> b", "error_class": "X"}},
     "does not fit the checkpoint's state: operator 0: a -> b"),
    ({"fit": {"status": "undecided", "message": "m"}}, "could not decide"),
    ({"inputs": 2}, "the checkpoint has 1 source(s), the job 2 input(s)"),
    ({"sources": [evidence.Source(0, "files", ("/x",), None, {}, problem="it read /x")]}, "source 0 of the checkpoint: it read /x"),
    ({"sink": Sink("/t", delta=False, exists=False)}, "there is no table at /t"),
    ({"sink": Sink("/t", delta=False, exists=True)}, "/t is not a Delta table"),
    ({"output": UNKNOWN, "batches": Batches(3, 4, 5)}, "Fix: --replay-last-batch"),
    ({"output": UNKNOWN, "batches": Batches(3, 4, 5), "merges": False, "replay_last_batch": True},
     "an append would write its rows twice"),
])
def test_each_refusal_is_one_line_with_its_fix(changes, words):
    found = _refusals(**changes)
    assert len(found) == 1 and words in found[0] and "Fix:" in found[0] and "\n" not in found[0], found


def test_replaying_the_batch_in_flight_is_allowed_for_merges_only():
    assert _refusals(output=UNKNOWN, batches=Batches(3, 4, 5), replay_last_batch=True) == []


def _checkpoint(root, entries: list[dict], log_offset: int) -> Checkpoint:
    """A checkpoint's offset log and file source log, in Spark's format."""
    os.makedirs(root / "offsets")
    os.makedirs(root / "sources" / "0")
    (root / "metadata").write_text('{"id":"q"}\n')
    (root / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n' + json.dumps({"logOffset": log_offset}) + "\n")
    (root / "sources" / "0" / "0").write_text("v1\n" + "".join(json.dumps(e) + "\n" for e in entries))
    return Checkpoint(str(root))


def test_a_file_source_is_matched_to_the_input_holding_its_files(tmp_path):
    entries = [{"path": f"file:///data/in/{n}.json", "timestamp": 1, "batchId": b} for n, b in (("a", 0), ("b", 1))]
    checkpoint = _checkpoint(tmp_path / "c", entries, 0)
    source, = evidence.sources(checkpoint, 0, {"events": "/data/in"}, evidence.FILES, ["events"])
    assert (source.input, source.files_read, source.where, source.problem) == ("events", 1, ("/data/in",), None)
    other, = evidence.sources(checkpoint, 0, {"events": "/data/other"}, evidence.FILES, ["events"])
    assert other.input is None and "none of the inputs' folders" in other.problem
    swapped, = evidence.sources(checkpoint, 0, {"events": "/data/in", "clicks": "/x"}, evidence.FILES, ["clicks"])
    assert "Spark matches sources by position" in swapped.problem


def test_a_kafka_source_is_matched_by_its_topic(tmp_path):
    root = tmp_path / "k"
    os.makedirs(root / "offsets")
    (root / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"events_v1":{"0":12,"1":7}}\n')
    source, = evidence.sources(Checkpoint(str(root)), 0, {"events": "events_v1"}, evidence.KAFKA, ["events"])
    assert (source.input, source.offset, source.problem) == ("events", {"events_v1": {"0": 12, "1": 7}}, None)
