"""A user's transformation that returns no stateful streaming frame is refused before any query starts, and
explain-key refuses a job whose operators it has no rules for, saying so, instead of guessing.

Real Spark: the frames are analysed by Spark (stateops.jobs.runtime.plan), the dedup-only job runs and leaves a real
checkpoint whose operators explain-key reads. Oracle: the file system (no checkpoint, no table written).
"""
from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from stateops.jobs.definition.environment import read_settings
from stateops.jobs.examples.builtin import EVENTS
from stateops.cli.main import main
from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.errors import ConfigError
from tests.support.user_configs import events_job_config

pytestmark = pytest.mark.spark


def stateless(events):
    return events.select("event_id", "event_time")


def batch_frame(events, spec):
    return events.sparkSession.createDataFrame([("e1",)], "event_id STRING")


def not_a_frame(events):
    return "events"


def dedup_only(events):
    return events.dropDuplicatesWithinWatermark(["event_id"])


def _spec(function: str) -> JobSpec:
    return JobSpec(name=function, inputs=(EVENTS,), transformation=f"{__name__}:{function}", output_mode="append",
                   sink_table=function, watermark_delay="10 minutes", watermark_min="1 minute",
                   watermark_max="1 hour", shuffle_partitions=2)


@pytest.mark.parametrize("function,words", [
    ("stateless", "returned a stateless streaming DataFrame (operators: "),
    ("batch_frame", "returned a batch DataFrame, not a streaming one"),
    ("not_a_frame", "returned str, not a DataFrame"),
])
def test_a_frame_that_is_not_stateful_and_streaming_is_refused_before_a_query_starts(spark, layout, function,
                                                                                      words):
    generate(layout, GeneratorConfig(events=20, files=1, users=5, seed=3))
    spec = _spec(function)
    with pytest.raises(ConfigError) as err:
        run_job(spark, spec, layout, settings=read_settings())
    assert err.value.field == f"jobs.{function}.transformation"
    assert words in str(err.value) and "Fix:" in str(err.value) and "stateful operator" in str(err.value)
    assert not os.path.exists(spec.checkpoint_path(layout)) and not os.path.exists(layout.table(function))
    assert not any(q.isActive for q in spark.streams.active)


def test_explain_key_says_it_does_not_support_a_job_whose_operators_fit_no_kind(spark, layout, tmp_path):
    generate(layout, GeneratorConfig(events=40, files=2, users=5, seed=3))
    result = run_job(spark, _spec("dedup_only"), layout, settings=read_settings())
    assert result.batches == 2
    config = events_job_config(tmp_path, _spec("dedup_only"))

    out = CliRunner().invoke(main, ["--home", layout.home, "--config", str(config), "explain-key", "dedup_only",
                                    "--key", "u1"])
    assert out.exit_code == 2, out.output
    assert ("explain-key does not support job dedup_only: it keeps deduplication state only (operators: "
            "dedupeWithinWatermark)") in out.output, out.output
    assert "stateops audit dedup_only" in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1, out.output
