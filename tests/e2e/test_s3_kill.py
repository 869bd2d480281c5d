"""kill -9 with the whole home on an S3 API (moto's server on loopback, tests/e2e/test_s3_home.py's fixtures):
20 trials, 10 on each of two jobs at once (as tests/e2e/test_fault_suite.py does on local disk), each a
`stateops jobs run` process SIGKILLed at a random point, its checkpoint written through S3A, its Delta table
and dead letters through delta-rs, its lease in the bucket. Then one run finishes the input and each table
must equal its oracle over the batches as the checkpoint's logs say they were composed: 0 duplicates, 0
lost, nothing invented, every malformed line a dead letter."""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from jobs.catalog import load_jobs
from jobs.generator import GeneratorConfig, generate
from jobs.runner import run_job
from stateops.layout import Layout
from tests.conftest import FAULT_COUNTS
from tests.delta_rows import table_rows
from tests.e2e.test_fault_suite import COLUMNS, _committed, _kill_trial
from tests.e2e.test_s3_home import BUCKET, PREFIX, _check_equals_oracle, s3  # noqa: F401 - the fixture

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.faults]

INPUT = GeneratorConfig(events=1200, files=20, users=80, late_share=0.03, duplicate_share=0.08,
                        malformed_share=0.02, orders=200, minutes_per_file=10, seed=41)
TRIALS = 10  # per job: 20 kills in all


def test_kill_9_with_the_home_on_s3_loses_nothing_and_duplicates_nothing(spark, s3, tmp_path, monkeypatch,
                                                                         record_property):
    monkeypatch.delenv("STATEOPS_CONTROL_HOME", raising=False)
    homes = {job: Layout.of(f"s3://{BUCKET}/{PREFIX}/{tmp_path.name}/{job}") for job in COLUMNS}
    for layout in homes.values():
        generate(layout, INPUT)

    def chain(job: str) -> list[dict]:
        rng = random.Random(len(job))
        return [_kill_trial(homes[job], job, rng) for _ in range(TRIALS)]

    with ThreadPoolExecutor(max_workers=len(homes)) as pool:  # the two chains overlap their JVM startups
        trials = dict(zip(homes, pool.map(chain, homes)))
    for job, layout in homes.items():
        result = run_job(spark, load_jobs()[job], layout)  # the last restart finishes the input
        expected = _check_equals_oracle(layout, job, str(tmp_path / f"mirror-{job}"))
        got = table_rows(layout.table(job), COLUMNS[job])
        counts = {"trials": len(trials[job]), "batches": _committed(layout.checkpoint(job)),
                  "killed_between_delta_and_commit": sum(t["delta_ahead"] for t in trials[job]),
                  "rows": len(got), "expected_rows": len(expected),
                  "duplicates": len(got) - len(set(got)) + sum(t["duplicates"] for t in trials[job]),
                  "lost": len(expected - set(got)), "skipped_on_last_restart": result.batches_skipped}
        record_property(FAULT_COUNTS, f"kill -9 {job} on S3: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
        assert counts["duplicates"] == 0 and counts["lost"] == 0, counts
    assert sum(len(t) for t in trials.values()) == 20
