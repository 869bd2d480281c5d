"""stateops.dagster.build_defs: the definitions for a config file and home given in code (they win over
STATEOPS_CONFIG and STATEOPS_HOME and are fixed in the paths resource), a subset of the jobs, a config error in
the CLI's one line, nothing written by building them, and no default executor (they merge with a project's)."""
from __future__ import annotations

import pytest
from dagster import AssetKey, Definitions, multiprocess_executor

from stateops.dagster import build_defs
from stateops.errors import ConfigError

pytestmark = pytest.mark.unit

CONFIG = '[jobs.user_activity]\nsink_table = "activity_given"\n'


def test_the_arguments_win_over_the_environment_and_are_fixed_in_the_definitions(tmp_path, monkeypatch):
    config = tmp_path / "given.toml"
    config.write_text(CONFIG)
    monkeypatch.setenv("STATEOPS_HOME", str(tmp_path / "env_home"))
    monkeypatch.setenv("STATEOPS_CONFIG", str(tmp_path / "absent.toml"))
    defs = build_defs(config_path=str(config), home=str(tmp_path / "given_home"))
    repo = Definitions.merge(defs, Definitions(executor=multiprocess_executor)).get_repository_def()
    assert AssetKey("activity_given") in repo.assets_defs_by_key
    paths = defs.resources["paths"]
    assert (paths.home, paths.config) == (str(tmp_path / "given_home"), str(config))
    assert paths.environment().catalog.job("user_activity").sink_table == "activity_given"
    assert not (tmp_path / "given_home").exists() and not (tmp_path / "env_home").exists()


def test_only_the_jobs_named(tmp_path):
    repo = build_defs(home=str(tmp_path / "home"), jobs=["order_payments"]).get_repository_def()
    jobs = {name for name in repo.job_names if not name.startswith("__")}
    assert jobs == {"order_payments_job", "order_payments_deep_audit", "order_payments_fast_audit",
                    "state_recovery", "retention_job"}
    assert {s.name for s in repo.schedule_defs} == {"order_payments_every_15_minutes",
                                                     "order_payments_deep_audit_hourly", "retention_daily"}


def test_an_unknown_job_or_a_config_typo_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as unknown:
        build_defs(home=str(tmp_path / "home"), jobs=["user_activity", "no_such_job"])
    assert str(unknown.value).startswith("jobs: names 'no_such_job', not a job of the config file. Fix: use some of")
    config = tmp_path / "typo.toml"
    config.write_text('[jobs.user_activity]\nwatermark_dely = "5 minutes"\n')
    with pytest.raises(ConfigError) as typo:
        build_defs(config_path=str(config), home=str(tmp_path / "home"))
    assert "\n" not in str(typo.value)
    assert str(typo.value).startswith("jobs.user_activity.watermark_dely: is not a setting that can be overridden")


def test_the_schedules_fire_when_the_config_file_says(tmp_path):
    """`[audit] deep_audit_cron` (every job, or one) and `[retention] cron` set the schedules' crons; the names stay."""
    config = tmp_path / "crons.toml"
    config.write_text('[audit]\ndeep_audit_cron = "*/10 * * * *"\n[audit.jobs.order_payments]\n'
                      'deep_audit_cron = "5,35 */2 * * 1-5"\n[retention]\ncron = "*/15 * * * *"\n')
    repo = build_defs(config_path=str(config), home=str(tmp_path / "home")).get_repository_def()
    crons = {s.name: s.cron_schedule for s in repo.schedule_defs}
    assert crons["user_activity_deep_audit_hourly"] == "*/10 * * * *"
    assert crons["order_payments_deep_audit_hourly"] == "5,35 */2 * * 1-5"
    assert crons["retention_daily"] == "*/15 * * * *"
    default = build_defs(home=str(tmp_path / "home")).get_repository_def()
    assert {s.name: s.cron_schedule for s in default.schedule_defs}["retention_daily"] == "30 3 * * *"


@pytest.mark.parametrize("table, key, value, why", [
    ("audit", "deep_audit_cron", "@hourly", "has 1 fields, not 5"),
    ("audit", "deep_audit_cron", "61 * * * *", "minute '61' is not *"),
    ("retention", "cron", "0 3 * * MON", "day-of-week 'MON' is not *"),
    ("retention", "cron", "*/0 * * * *", "minute '*/0' is not *"),
])
def test_a_bad_cron_is_refused_naming_the_field(tmp_path, table, key, value, why):
    config = tmp_path / "bad.toml"
    config.write_text(f'[{table}]\n{key} = "{value}"\n')
    with pytest.raises(ConfigError) as bad:
        build_defs(config_path=str(config), home=str(tmp_path / "home"))
    assert str(bad.value).startswith(f"{table}.{key}: ") and why in str(bad.value) and "\n" not in str(bad.value)
    assert "Fix: write five numeric cron fields" in str(bad.value)
