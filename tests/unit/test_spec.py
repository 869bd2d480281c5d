"""Invalid specs fail at load with a message naming the field and the fix."""
from __future__ import annotations

from dataclasses import replace

import pytest

from stateops.jobs.definition import transformation
from stateops.jobs.definition.environment import load_jobs
from stateops.jobs.definition.spec import InputSpec, JobSpec, check_output_columns, spec_from_config
from stateops.jobs.examples.builtin import BUILTIN
from stateops.errors import ConfigError
from stateops.layout import Layout

pytestmark = pytest.mark.unit
BASE = BUILTIN[0]


@pytest.mark.parametrize("change,field,words", [
    ({"watermark_delay": "ten minutes"}, "jobs.user_activity.watermark_delay", "not an interval"),
    ({"watermark_delay": "3 hours"}, "jobs.user_activity.watermark_delay", "outside the allowed bounds"),
    ({"watermark_min": "3 hours"}, "jobs.user_activity.watermark_min", "above watermark_max"),
    ({"output_mode": "complete"}, "jobs.user_activity.output_mode", "unknown output mode"),
    ({"merge_keys": ()}, "jobs.user_activity.merge_keys", "update mode needs merge keys"),
    ({"transformation": "nope"}, "jobs.user_activity.transformation", "not a reference to a callable"),
    ({"shuffle_partitions": 0}, "jobs.user_activity.shuffle_partitions", "not a positive integer"),
    ({"source": "s3"}, "jobs.user_activity.source", "unknown source"),
    ({"source": "kafka"}, "jobs.user_activity.kafka_bootstrap_servers", "required"),
    ({"trigger_interval": "soon"}, "jobs.user_activity.trigger_interval", "not an interval"),
    ({"name": "User Activity"}, "name", "not a valid job name"),
])
def test_bad_spec_names_field_and_fix(change, field, words):
    with pytest.raises(ConfigError) as err:  # a spec is validated as it is made; then the catalog's check
        transformation.check(replace(BASE, **change))
    assert err.value.field == field
    assert words in str(err.value) and "Fix:" in str(err.value)


def test_unknown_watermark_column_lists_the_real_columns():
    bad = InputSpec("events", "event_id STRING, ts TIMESTAMP", "event_time")
    with pytest.raises(ConfigError) as err:
        replace(BASE, inputs=(bad,))
    assert err.value.field == "jobs.user_activity.inputs.events.time_column"
    assert "unknown column 'event_time'" in str(err.value) and "'ts'" in str(err.value)


def test_watermark_column_must_be_a_timestamp():
    bad = InputSpec("events", "event_id STRING, event_time STRING", "event_time")
    with pytest.raises(ConfigError, match="not timestamp"):
        replace(BASE, inputs=(bad,))


def test_unreadable_schema_is_refused():
    bad = InputSpec("events", "event_id STRNG, event_time TIMESTAMP", "event_time")
    with pytest.raises(ConfigError, match="cannot read column definition 'event_id STRNG'"):
        replace(BASE, inputs=(bad,))


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


@pytest.mark.parametrize("text,field,words", [
    # A string is not a list of columns (it used to become ('u', 's', 'e', ...) and fail at the second batch).
    ('merge_keys = "user_id"', "jobs.user_activity.merge_keys", "not a list of column names"),
    ('merge_keys = ["user_id", 3]', "jobs.user_activity.merge_keys", "not a list of column names"),
    ('merge_keys = ["user id"]', "jobs.user_activity.merge_keys", "not a column name"),
    ('merge_keys = ["user_id", "user_id"]', "jobs.user_activity.merge_keys", "listed twice"),
    # TOML `true` is a Python bool, and bool is an int subclass.
    ("shuffle_partitions = true", "jobs.user_activity.shuffle_partitions", "True is a boolean, not a whole number"),
    ("max_files_per_trigger = false", "jobs.user_activity.max_files_per_trigger", "is a boolean"),
    ("shuffle_partitions = 8.0", "jobs.user_activity.shuffle_partitions", "is a decimal number"),
    ('shuffle_partitions = "8"', "jobs.user_activity.shuffle_partitions", "is text, not a whole number"),
    ("checkpoint = 42", "jobs.user_activity.checkpoint", "42 is an integer, not text"),
    ("checkpoint = true", "jobs.user_activity.checkpoint", "is a boolean, not text"),
    ('checkpoint = ""', "jobs.user_activity.checkpoint", "not an absolute path or a URL"),
    ('checkpoint = "ckpt/user_activity"', "jobs.user_activity.checkpoint", "not an absolute path or a URL"),
    ("sink_table = 7", "jobs.user_activity.sink_table", "is an integer, not text"),
    ('future_tolerance = "soon"', "jobs.user_activity.future_tolerance", "not an interval"),
    ('future_tolerance = "0 seconds"', "jobs.user_activity.future_tolerance", "not positive"),
    # A config file may narrow the bounds it is checked against, never widen them (built-in: 5 min .. 2 h).
    ('watermark_min = "1 minute"\nwatermark_delay = "2 minutes"', "jobs.user_activity.watermark_min",
     "outside the built-in bounds [5 minutes, 2 hours]"),
    ('watermark_max = "1 day"\nwatermark_delay = "20 hours"', "jobs.user_activity.watermark_max",
     "outside the built-in bounds"),
    ('watermark_max = "forever"', "jobs.user_activity.watermark_max", "not an interval"),
])
def test_bad_override_fails_at_load_with_field_and_fix(tmp_path, text, field, words):
    config = tmp_path / "stateops.toml"
    config.write_text(f"[jobs.user_activity]\n{text}\n")
    with pytest.raises(ConfigError) as err:
        load_jobs(str(config), Layout(str(tmp_path / "home")))
    assert err.value.field == field
    assert words in str(err.value) and "Fix:" in str(err.value), str(err.value)


def test_overrides_may_narrow_the_watermark_bounds(tmp_path):
    config = tmp_path / "stateops.toml"
    config.write_text('[jobs.user_activity]\nwatermark_min = "10 minutes"\nwatermark_max = "1 hour"\n'
                      'merge_keys = ["window_start", "window_end", "user_id"]\nfuture_tolerance = "6 hours"\n'
                      f'checkpoint = "{tmp_path}/elsewhere/user_activity"\n')
    spec = load_jobs(str(config), Layout(str(tmp_path / "home")))["user_activity"]
    assert (spec.watermark_min, spec.watermark_max) == ("10 minutes", "1 hour")
    assert spec.merge_keys == ("window_start", "window_end", "user_id")
    assert spec.future_tolerance_seconds == 6 * 3600
    assert spec.checkpoint_path(Layout(str(tmp_path / "home"))) == f"{tmp_path}/elsewhere/user_activity"
    with pytest.raises(ConfigError, match="outside the allowed bounds"):  # narrowed bounds are enforced
        load_jobs(str(_write(tmp_path, 'watermark_max = "1 hour"\nwatermark_delay = "90 minutes"')))


def _write(tmp_path, text: str):
    config = tmp_path / "other.toml"
    config.write_text(f"[jobs.user_activity]\n{text}\n")
    return config


@pytest.mark.parametrize("where,words", [
    ("{home}/checkpoints/user_sessions", "the checkpoint of user_sessions"),
    ("{home}/checkpoints/user_sessions/inner", "the checkpoint of user_sessions"),
    ("{home}/checkpoints", "the dead-letter checkpoint of user_activity"),
    ("{home}/landing/events/ckpt", "the landing zone of events"),
    ("{home}/tables/user_activity", "the table user_activity"),
    ("{home}/checkpoints/_deadletter/user_activity", "the dead-letter checkpoint of user_activity"),
    ("{home}/ops/tables/progress", "the ops tables"),
    ("{home}", "the ops tables"),
])
def test_checkpoint_must_be_the_jobs_own(tmp_path, where, words):
    home = tmp_path / "home"
    config = _write(tmp_path, f'checkpoint = "{where.format(home=home)}"')
    with pytest.raises(ConfigError) as err:
        load_jobs(str(config), Layout(str(home)))
    assert err.value.field == "jobs.user_activity.checkpoint"
    assert f"overlaps {words}" in str(err.value) and "Fix:" in str(err.value)


def test_merge_keys_must_be_output_columns():
    check_output_columns(BASE, ["window_start", "window_end", "user_id", "events"])
    with pytest.raises(ConfigError) as err:
        check_output_columns(replace(BASE, merge_keys=("window_start", "user")), ["window_start", "user_id"])
    assert err.value.field == "jobs.user_activity.merge_keys" and "['user'] are not output columns" in str(err.value)


DEFINITION = {"transformation": "my_visits:visits", "output_mode": "append", "watermark_delay": "10 minutes",
              "watermark_min": "1 minute", "watermark_max": "1 hour",
              "inputs": [{"name": "clicks", "schema": "click_id STRING, click_time TIMESTAMP",
                          "time_column": "click_time"}]}


@pytest.mark.parametrize("change,field,words", [
    # a typo in a key
    ({"watermark_dealy": "5 minutes"}, "jobs.visits.watermark_dealy", "is not a job setting"),
    # a whole number
    ({"max_files_per_trigger": "2"}, "jobs.visits.max_files_per_trigger", "'2' is text, not a whole number"),
    # text, and text that may be absent
    ({"output_mode": ["append"]}, "jobs.visits.output_mode", "['append'] is a list, not text"),
    ({"output_time_column": 3}, "jobs.visits.output_time_column", "3 is an integer, not text"),
    # a list of names
    ({"idempotent_key": "click_id"}, "jobs.visits.idempotent_key", "'click_id' is text, not a list of column names"),
    ({"owners": [1]}, "jobs.visits.owners", "1 is an integer, not a list of names"),
    # a table of text values
    ({"tags": "web"}, "jobs.visits.tags", "'web' is not a table of text values"),
    ({"kafka_options": {"maxOffsetsPerTrigger": 100}}, "jobs.visits.kafka_options", "not a table of text values"),
    # the inputs: a list of tables, each with exactly its keys, each text
    ({"inputs": {"name": "clicks"}}, "jobs.visits.inputs", "is a table, not a list of tables"),
    ({"inputs": ["clicks"]}, "jobs.visits.inputs", "'clicks' is text, not a table"),
    ({"inputs": [{**DEFINITION["inputs"][0], "colour": "red"}]}, "jobs.visits.inputs", "unknown key 'colour'"),
    ({"inputs": [{"name": "clicks", "schema": "click_id STRING"}]}, "jobs.visits.inputs", "'time_column' is missing"),
    ({"inputs": [{**DEFINITION["inputs"][0], "schema": 5}]}, "jobs.visits.inputs.schema", "5 is an integer, not text"),
    # the join and explain tables
    ({"join": "clicks"}, "jobs.visits.join", "'clicks' is text, not a table"),
    ({"join": {"left": "clicks", "right": "clicks", "upper": "1 minute", "within": "x"}}, "jobs.visits.join",
     "unknown key 'within'"),
    ({"explain": {"key_columns": ["click_id"]}}, "jobs.visits.explain.key_columns",
     "is a list, not a table of text values"),
    ({"explain": {"late_margin": 0}}, "jobs.visits.explain.late_margin", "0 is an integer, not text"),
])
def test_each_kind_of_field_refuses_a_wrong_type_in_one_line(change, field, words):
    """One validation system for every field kind: the field, what the value is, and the fix, on one line."""
    with pytest.raises(ConfigError) as err:
        spec_from_config("visits", {**DEFINITION, **change})
    message = str(err.value)
    assert err.value.field == field, message
    assert words in message and "Fix:" in message and "\n" not in message, message


def test_a_definition_from_the_config_file_is_the_python_one():
    """TOML lists become tuples and tables nested specs: the same JobSpec a package would declare."""
    spec = spec_from_config("visits", DEFINITION)
    assert spec == JobSpec(name="visits", sink_table="visits", transformation="my_visits:visits",
                           output_mode="append", watermark_delay="10 minutes", watermark_min="1 minute",
                           watermark_max="1 hour",
                           inputs=(InputSpec("clicks", "click_id STRING, click_time TIMESTAMP", "click_time"),),
                           shuffle_partitions=spec.shuffle_partitions)


@pytest.mark.parametrize("archive_dir,accepted", [
    ("/var/stateops/archives", True), ("s3://bucket/archives", True),
    ("archives", False), ("gs://bucket/archives", False), ("https://host/archives", False)])
def test_an_archive_dir_is_accepted_where_the_runbooks_journal_can_lock(archive_dir, accepted):
    """One rule for archive_dir, the recovery preflight's (storage.can_lock): local or POSIX shared paths and S3;
    anything else refused when the job is defined, naming the field and the fix."""
    if accepted:
        assert replace(BASE, archive_dir=archive_dir).archive_dir == archive_dir
    else:
        with pytest.raises(ConfigError, match=r"archive_dir: .* the runbook's journal can lock"):
            replace(BASE, archive_dir=archive_dir)
