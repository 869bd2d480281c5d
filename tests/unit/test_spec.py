"""Invalid specs fail at load with a message naming the field and the fix."""
from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.catalog import BUILTIN, load_jobs
from jobs.spec import InputSpec, validate
from jobs.transforms import TRANSFORMATIONS
from stateops.errors import ConfigError

pytestmark = pytest.mark.unit
BASE = BUILTIN[0]


@pytest.mark.parametrize("change,field,words", [
    ({"watermark_delay": "ten minutes"}, "jobs.user_activity.watermark_delay", "not an interval"),
    ({"watermark_delay": "3 hours"}, "jobs.user_activity.watermark_delay", "outside the allowed bounds"),
    ({"watermark_min": "3 hours"}, "jobs.user_activity.watermark_min", "above watermark_max"),
    ({"output_mode": "complete"}, "jobs.user_activity.output_mode", "unknown output mode"),
    ({"merge_keys": ()}, "jobs.user_activity.merge_keys", "update mode needs merge keys"),
    ({"transformation": "nope"}, "jobs.user_activity.transformation", "unknown transformation"),
    ({"shuffle_partitions": 0}, "jobs.user_activity.shuffle_partitions", "not a positive integer"),
    ({"source": "s3"}, "jobs.user_activity.source", "unknown source"),
    ({"source": "kafka"}, "jobs.user_activity.kafka_bootstrap_servers", "required"),
    ({"trigger_interval": "soon"}, "jobs.user_activity.trigger_interval", "not an interval"),
    ({"name": "User Activity"}, "name", "not a valid job name"),
])
def test_bad_spec_names_field_and_fix(change, field, words):
    with pytest.raises(ConfigError) as err:
        validate(replace(BASE, **change), TRANSFORMATIONS)
    assert err.value.field == field
    assert words in str(err.value) and "Fix:" in str(err.value)


def test_unknown_watermark_column_lists_the_real_columns():
    bad = InputSpec("events", "event_id STRING, ts TIMESTAMP", "event_time")
    with pytest.raises(ConfigError) as err:
        validate(replace(BASE, inputs=(bad,)), TRANSFORMATIONS)
    assert err.value.field == "jobs.user_activity.inputs.events.time_column"
    assert "unknown column 'event_time'" in str(err.value) and "'ts'" in str(err.value)


def test_watermark_column_must_be_a_timestamp():
    bad = InputSpec("events", "event_id STRING, event_time STRING", "event_time")
    with pytest.raises(ConfigError, match="not timestamp"):
        validate(replace(BASE, inputs=(bad,)), TRANSFORMATIONS)


def test_unreadable_schema_is_refused():
    bad = InputSpec("events", "event_id STRNG, event_time TIMESTAMP", "event_time")
    with pytest.raises(ConfigError, match="cannot read column definition 'event_id STRNG'"):
        validate(replace(BASE, inputs=(bad,)), TRANSFORMATIONS)


def test_builtin_jobs_are_valid_and_config_overrides_apply(tmp_path):
    config = tmp_path / "stateops.toml"
    config.write_text('[jobs.user_activity]\nwatermark_delay = "20 minutes"\nshuffle_partitions = 8\n')
    jobs = load_jobs(str(config))
    assert set(jobs) == {"user_activity", "user_sessions", "order_payments", "user_actions"}
    assert jobs["user_activity"].watermark_seconds == 1200
    assert jobs["user_activity"].shuffle_partitions == 8


@pytest.mark.parametrize("text,field,words", [
    ('[jobs.nope]\nshuffle_partitions = 2\n', "jobs.nope", "not a known job"),
    ('[jobs.user_activity]\ncolour = "red"\n', "jobs.user_activity.colour", "not a setting that can be overridden"),
    ('[jobs.user_activity]\nwatermark_delay = "ten minutes"\n', "jobs.user_activity.watermark_delay",
     "not an interval"),
    ('[jobs.user_activity\n', "STATEOPS_CONFIG", "not valid TOML"),
])
def test_bad_config_file_names_the_field(tmp_path, text, field, words):
    config = tmp_path / "stateops.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_jobs(str(config))
    assert err.value.field == field and words in str(err.value)


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_jobs(str(tmp_path / "absent.toml"))
