"""The store per job (issue 51): a job with `state_store = "memory"` gets Spark's HDFS-backed store on a new checkpoint,
runs, is audited, rewound, rebuilt (the rebuild keeps its store) and its home moved like any other job;
`jobs describe` shows the store and formats in force and where each comes from. Oracles: Spark's own offset log and
state files, its state reader, the batch recomputation of the input (tests/support/outcomes.py)."""
from __future__ import annotations

import json
import os
import traceback

import pytest
from click.testing import CliRunner

from stateops.audit import Thresholds, deep_audit, fast_audit
from stateops.audit.context import recent_progress
from stateops.audit.findings import latest_state_memory
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.cli.main import main
from stateops.layout import Layout
from stateops.checkpoints.state_store import HDFS_PROVIDER

from tests.support.audit_queries import nonzero, oracle_rows
from tests.support.outcomes import assert_equals_oracle
from tests.support.scenarios import SMALL, builtin, more_input
from stateops.jobs.demo.generator import generate

pytestmark = pytest.mark.spark

JOB = "user_activity"


def _configured(layout: Layout, tmp_path, monkeypatch) -> str:
    config = os.path.join(tmp_path, "stateops.toml")
    with open(config, "w") as handle:
        handle.write(f'[jobs.{JOB}]\nstate_store = "memory"\n')
    monkeypatch.setenv("STATEOPS_CONFIG", config)
    monkeypatch.setenv("STATEOPS_HOME", layout.home)
    return config


def _cli(*args: str) -> dict | str:
    done = CliRunner().invoke(main, list(args))
    assert done.exit_code == 0, done.output + "".join(traceback.format_exception(done.exception)) if \
        done.exception else done.output
    return json.loads(done.output) if "--json" in args else done.output


def _store(layout: Layout) -> tuple[str, set[str]]:
    checkpoint = Checkpoint.open(layout.checkpoint(JOB))
    kinds = {f.kind for f in checkpoint.state_files() if f.version is not None}
    return checkpoint.state_provider(checkpoint.offset_batches()[-1]), kinds


def _audit_equals_reader(spark, layout: Layout) -> None:
    report = deep_audit(spark, layout.checkpoint(JOB))
    assert report.provider == HDFS_PROVIDER and report.operators
    for op in report.operators:
        expected = oracle_rows(spark, layout.checkpoint(JOB), operatorId=op.operator_id)
        assert nonzero(op.rows_per_partition) == expected and op.rows_total == sum(expected.values())


def test_a_memory_job_runs_on_the_in_memory_store_and_describe_says_so(spark, layout, tmp_path, monkeypatch):
    _configured(layout, tmp_path, monkeypatch)
    described = _cli("jobs", "describe", JOB, "--json")["state_store"]
    assert described["store"] == {"value": "memory", "source": "a new checkpoint's: the job's state_store"}
    assert described["changelog"]["value"] is None and described["join_format"]["value"] == 2
    generate(layout, SMALL)
    _cli("jobs", "run", JOB)
    assert _store(layout) == (HDFS_PROVIDER, {"delta"})  # Spark's in-memory store: N.delta files, no changelog
    described = _cli("jobs", "describe", JOB, "--json")["state_store"]
    batch = Checkpoint.open(layout.checkpoint(JOB)).offset_batches()[-1]
    assert described["store"] == {"value": "memory", "source": f"the checkpoint (offset log batch {batch})"}
    assert described["notes"] == []
    assert "store                  memory (the checkpoint" in _cli("jobs", "describe", JOB)
    assert_equals_oracle(layout, builtin(layout, JOB))
    _audit_equals_reader(spark, layout)
    _memory_guard(spark, layout)


def _memory_guard(spark, layout: Layout) -> None:
    """STATE_MEMORY: Spark's own estimate of the store's heap at the latest batch (the progress table) against the
    heap the settings give it; silent at the default 2 GiB, an error when the heap is set below it."""
    progress = recent_progress(layout, Checkpoint.open(layout.checkpoint(JOB)).query_id(), 50)
    used = latest_state_memory(progress)
    assert used and used > 0, progress[-1:]  # Spark's SizeEstimator of the loaded maps
    assert not [f for f in deep_audit(spark, layout.checkpoint(JOB), layout=layout, job=JOB).findings
                if f.code == "STATE_MEMORY"]
    small = Thresholds(state_memory_heap_bytes=used)  # the state already is the whole heap
    for report in (deep_audit(spark, layout.checkpoint(JOB), thresholds=small, layout=layout, job=JOB),
                   fast_audit(layout.checkpoint(JOB), thresholds=small, layout=layout, job=JOB)):
        (found,) = [f for f in report.findings if f.code == "STATE_MEMORY"]
        assert found.severity == "error" and found.details["bytes"] == used, found
        assert found.details["source"] == "progress"


@pytest.mark.long  # the default run: a memory job's run, describe and deep audit (above); each runbook on RocksDB
def test_a_memory_job_is_rewound_rebuilt_on_its_store_and_moved(spark, layout, tmp_path, monkeypatch):
    _configured(layout, tmp_path, monkeypatch)
    generate(layout, SMALL)
    _cli("jobs", "run", JOB)
    spec = builtin(layout, JOB)

    _cli("recover", "run", JOB, "--mode", "rewind", "--to-batch", "1", "--confirm", JOB)
    assert _store(layout)[0] == HDFS_PROVIDER
    assert_equals_oracle(layout, spec)

    # The rebuild's plan says the new checkpoint keeps the store; the new checkpoint has it.
    planned = _cli("recover", "run", JOB, "--mode", "rebuild", "--json")
    assert planned["plan"]["settings_after"]["state_store"] == "memory, join format 2, checkpoint format 1"
    assert any(n.startswith("the new checkpoint keeps the old one's state store and formats: memory")
               for n in planned["plan"]["notes"]), planned["plan"]["notes"]
    monkeypatch.delenv("STATEOPS_CONFIG")  # the job no longer names its store: the rebuild keeps the old one's
    _cli("recover", "run", JOB, "--mode", "rebuild", "--confirm", JOB)
    assert _store(layout) == (HDFS_PROVIDER, {"delta"})
    described = _cli("jobs", "describe", JOB, "--json")["state_store"]
    assert described["store"]["value"] == "memory"
    assert_equals_oracle(layout, spec)
    _audit_equals_reader(spark, layout)

    # The home moved to another folder: the job goes on there on its store, oracle-exact.
    moved = Layout(str(tmp_path / "moved"))
    _cli("home", "move", "--to", moved.home, "--confirm")
    monkeypatch.setenv("STATEOPS_HOME", moved.home)
    more_input(moved, hour=5, seed=52)
    _cli("jobs", "run", JOB)
    assert _store(moved)[0] == HDFS_PROVIDER
    assert_equals_oracle(moved, builtin(moved, JOB))
