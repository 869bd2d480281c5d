"""kill -9 with the whole home on an S3 API (moto's server on loopback; long tier): 20 trials on each of two
jobs at once (as tests/e2e/test_fault_suite.py does on local disk), each a `stateops jobs run` process SIGKILLed
at a random point, its checkpoint written through S3A, its Delta table and dead letters through delta-rs, its
lease in the bucket. Then one run finishes the input and each table must equal its oracle over the batches as
the checkpoint's logs say they were composed: 0 duplicates, 0 lost, nothing invented, every malformed line a
dead letter."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from stateops.jobs.definition.environment import load_jobs, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.layout import Layout
from tests.support.kill_trials import chain, committed, record_counts, trial_counts
from tests.support.outcomes import COLUMNS, assert_equals_oracle, local_mirror

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.faults, pytest.mark.long, pytest.mark.usefixtures("s3_spark")]

TRIALS = 20  # per job
INPUT = GeneratorConfig(events=2400, files=40, users=80, late_share=0.03, duplicate_share=0.08,
                        malformed_share=0.02, orders=400, minutes_per_file=10, seed=41)


def test_kill_9_with_the_home_on_s3_loses_nothing_and_duplicates_nothing(spark, s3_homes, tmp_path, monkeypatch,
                                                                         record_property):
    monkeypatch.delenv("STATEOPS_CONTROL_HOME", raising=False)
    homes = {job: Layout.of(s3_homes.url(f"{tmp_path.name}/{job}")) for job in COLUMNS}
    for layout in homes.values():
        generate(layout, INPUT)
    with ThreadPoolExecutor(max_workers=len(homes)) as pool:  # the two chains overlap their JVM startups
        done = dict(zip(homes, pool.map(lambda job: chain(homes[job], job, TRIALS, seed=len(job)), homes)))
    for job, layout in homes.items():
        spec = load_jobs()[job]
        result = run_job(spark, spec, layout, settings=read_settings())  # the last restart finishes the input
        counts = {**trial_counts(done[job]), "batches": committed(layout.checkpoint(job)),
                  **assert_equals_oracle(layout, spec, local_mirror(layout, spec, str(tmp_path / f"mirror-{job}"))),
                  "skipped_on_last_restart": result.batches_skipped}
        counts["duplicates"] += counts.pop("duplicates_after_a_trial")
        record_counts(record_property, f"kill -9 {job} on S3", counts)
        assert counts["duplicates"] == 0 and counts["lost"] == 0, counts
    assert sum(len(t) for t in done.values()) == 2 * TRIALS
