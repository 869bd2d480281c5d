"""The dead-letter writer's pure parts (stateops.jobs.runtime.deadletters): a map task's repeats dropped and only
them, and the ledger of judged input (files, Kafka offsets per partition) that keeps a line's dead letter single
across rewinds and the retired dead-letter query."""
import pytest

from stateops.jobs.runtime.deadletters import Ledger, unique

pytestmark = pytest.mark.unit


def _row(number, partition=0, raw=b"bad", **origin):
    return {"input": "events", "task_partition": partition, "task_number": number, "raw_bytes": raw, **origin}


def test_a_repeated_task_is_dropped_and_equal_lines_stay():
    first = [_row(0), _row(1), _row(2), _row(0, partition=1)]
    again = [_row(0), _row(1), _row(2)]             # partition 0's task collected a second time
    assert unique(first + again) == first           # equal bytes at other positions are other lines
    other = [{**row, "input": "payments"} for row in first]
    assert unique(first + other) == first + other   # each input numbers its own rows


def test_the_ledger_holds_files_whatever_their_url_spelling():
    ledger = Ledger()
    ledger.add({"input": "events", "source_file": "file:///home/landing/events/a.json"})
    assert ledger.holds({"input": "events", "source_file": "file:/home/landing/events/a.json"})
    assert not ledger.holds({"input": "events", "source_file": "file:/home/landing/events/b.json"})


def test_the_ledger_holds_kafka_offsets_up_to_the_newest_judged_per_partition():
    ledger = Ledger()
    ledger.add({"input": "events", "source_file": None, "kafka_partition": 1, "kafka_offset": 41})
    ledger.add({"input": "events", "source_file": None, "kafka_partition": 1, "kafka_offset": 17})
    kafka = lambda name, p, o: {"input": name, "source_file": None, "kafka_partition": p, "kafka_offset": o}  # noqa: E731
    assert ledger.holds(kafka("events", 1, 41)) and ledger.holds(kafka("events", 1, 3))
    assert not ledger.holds(kafka("events", 1, 42))
    assert not ledger.holds(kafka("events", 0, 3))      # another partition
    assert not ledger.holds(kafka("payments", 1, 3))    # another input (topic)


def test_a_retirement_record_is_part_of_the_ledger(tmp_path):
    judged = {"files": ["file:///h/landing/events/c.json"], "offsets": {"events": {"2": 99}}}
    ledger = Ledger.of(str(tmp_path / "no-table"), judged)
    assert ledger.holds({"input": "events", "source_file": "/h/landing/events/c.json"})
    assert ledger.holds({"input": "events", "source_file": None, "kafka_partition": 2, "kafka_offset": 99})
    assert not ledger.holds({"input": "events", "source_file": None, "kafka_partition": 2, "kafka_offset": 100})
