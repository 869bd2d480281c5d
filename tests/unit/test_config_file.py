"""The config file is validated whole when an entry point loads it: a typo in any section (an unknown table, an
unknown key at any level, a per-job table naming no job) fails at load with one line naming the field and the
fix, from the library and from the CLI (exit 2). And the catalog is loaded once per entry point: one CLI
command, one sensor tick."""
from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from stateops.jobs.definition.catalog import Catalog
from stateops.cli.main import main
from stateops.errors import ConfigError
from stateops.layout import Layout

pytestmark = pytest.mark.unit

TYPOS = [
    ("[audlt]\nskew_ratio = 5\n", "audlt", "is not a table StateOps reads", "use one of ['catalog', 'jobs'"),
    ("[catalog]\nbuiltin_job = false\n", "catalog.builtin_job", "is not a catalog setting", "builtin_jobs"),
    ("[jobs.user_activity]\nwatermark_dely = \"20 minutes\"\n", "jobs.user_activity.watermark_dely",
     "is not a setting that can be overridden", "watermark_delay"),
    ("[jobs.user_activty]\nshuffle_partitions = 8\n", "jobs.user_activty", "is not a known job", "user_activity"),
    ("[audit]\nskew_ration = 5\n", "audit.skew_ration", "is not an audit threshold", "skew_ratio"),
    ("[audit.jobs.user_activity]\ngrowth_ration = 2\n", "audit.jobs.user_activity.growth_ration",
     "is not an audit threshold", "growth_ratio"),
    ("[audit.jobs.user_activty]\ngrowth_ratio = 2\n", "audit.jobs.user_activty", "is not a known job",
     "user_activity"),
    ("[remediation]\nmod = \"auto\"\n", "remediation.mod", "is not a remediation setting", "'mode'"),
    ("[remediation.jobs.user_activity]\ndaily_budjet = 1\n", "remediation.jobs.user_activity.daily_budjet",
     "is not a remediation setting", "daily_budget"),
    ("[remediation.jobs.user_activty]\nmode = \"auto\"\n", "remediation.jobs.user_activty", "is not a known job",
     "user_activity"),
    ("[retention]\nkeep_archive = 3\n", "retention.keep_archive", "is not a retention setting", "keep_archives"),
    ("[retention.jobs.user_activity]\nrewind_batch = 3\n", "retention.jobs.user_activity.rewind_batch",
     "is not a retention setting", "rewind_batches"),
    ("[retention.jobs.user_activty]\nrewind_batches = 3\n", "retention.jobs.user_activty", "is not a known job",
     "user_activity"),
    ("[retention.ops_tables]\ncompacted = true\n", "retention.ops_tables.compacted", "is not a retention setting",
     "compact"),
    ("[remediation]\nmode = \"yolo\"\n", "remediation.mode", "'yolo' is not one of 'plan', 'auto'", "'plan', 'auto'"),
    ("[audit]\ntop_keys = \"5\"\n", "audit.top_keys", "'5' is not a number", "top_keys = 5"),
    ("audit = 5\n", "audit", "5 is not a table", "[audit]"),
]


@pytest.mark.parametrize("text, field, problem, fix", TYPOS, ids=[t[1] for t in TYPOS])
def test_a_typo_in_any_section_fails_at_load_naming_the_field_and_the_fix(tmp_path, text, field, problem, fix):
    config = tmp_path / "stateops.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as err:
        Catalog.load(Layout(str(tmp_path / "home")), str(config))
    assert err.value.field == field, str(err.value)
    assert problem in err.value.problem and fix in err.value.fix, str(err.value)
    result = CliRunner().invoke(main, ["--home", str(tmp_path / "home"), "--config", str(config), "jobs", "list"])
    assert result.exit_code == 2 and result.output.strip() == f"Error: {err.value}"


def test_a_valid_file_with_every_section_loads(tmp_path):
    config = tmp_path / "stateops.toml"
    config.write_text("[catalog]\nbuiltin_jobs = true\n[jobs.user_activity]\nshuffle_partitions = 8\n"
                      "[audit]\nskew_ratio = 5\n[audit.jobs.user_activity]\nskew_ratio = 6\n"
                      "[remediation]\nmode = \"auto\"\n[remediation.jobs.user_sessions]\nmode = \"plan\"\n"
                      "[retention]\nkeep_archives = 2\norphan_idle = \"3 days\"\n[retention.jobs.order_payments]\n"
                      "rewind_batches = 5\n[retention.ops_tables]\ncompact = false\n")
    catalog = Catalog.load(Layout(str(tmp_path / "home")), str(config))
    assert catalog.jobs["user_activity"].shuffle_partitions == 8
    assert (catalog.thresholds("user_activity").skew_ratio, catalog.thresholds("user_sessions").skew_ratio) == (6, 5)
    assert (catalog.policy("user_activity").mode, catalog.policy("user_sessions").mode) == ("auto", "plan")
    assert catalog.retention.for_job("order_payments").rewind_batches == 5
    assert catalog.retention.for_job("user_activity").keep_archives == 2
    assert (catalog.retention.orphan_idle, catalog.retention.ops_tables.compact) == ("3 days", False)


def _count_loads(monkeypatch):
    """Counts Catalog.load calls (the real loader runs)."""
    calls = []
    real = Catalog.load.__func__

    def counting(cls, layout, config_path):
        calls.append(config_path)
        return real(cls, layout, config_path)

    monkeypatch.setattr(Catalog, "load", classmethod(counting))
    return calls


def test_one_cli_command_loads_the_catalog_once(tmp_path, monkeypatch):
    loads = _count_loads(monkeypatch)
    config = tmp_path / "stateops.toml"
    config.write_text("[jobs.user_activity]\nshuffle_partitions = 8\n")
    home = str(tmp_path / "home")
    for args in (["jobs", "status", "--json"], ["jobs", "describe", "user_activity", "--json"],
                 ["recover", "plan", "user_activity", "--mode", "adjust", "--watermark", "20 minutes"],
                 ["retention", "plan", "--json"]):
        loads.clear()
        result = CliRunner().invoke(main, ["--home", home, "--config", str(config), *args])
        assert loads == [str(config)], (args, result.output)
    loads.clear()
    assert CliRunner().invoke(main, ["--home", home, "generate", "--events", "10"]).exit_code == 0
    assert loads == []  # a command that needs no job never loads the catalog


def test_one_sensor_tick_loads_the_catalog_once(tmp_path, monkeypatch):
    loads = _count_loads(monkeypatch)
    from dagster import DagsterInstance

    from tests.support.sensor_harness import Harness

    config = tmp_path / "stateops.toml"
    config.write_text("[remediation]\nmode = \"auto\"\n")
    monkeypatch.setenv("STATEOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STATEOPS_CONFIG", str(config))
    with DagsterInstance.ephemeral() as instance:
        harness = Harness(instance)
        for sensor in ("state_skew_sensor", "state_growth_sensor", "query_health_sensor"):
            loads.clear()
            result = harness.tick(sensor)
            assert "no checkpoint yet" in str(result.skip_reason) or "idle" in str(result.skip_reason)
            assert loads == [str(config)], sensor


def test_the_cli_leaves_the_environment_alone(tmp_path):
    """--home and --config reach every command through the context, not by rewriting os.environ (a subprocess,
    so that nothing of this process's environment can leak into the check)."""
    code = ("import os, sys; from click.testing import CliRunner; from stateops.cli.main import main; "
            f"r = CliRunner().invoke(main, ['--home', {str(tmp_path)!r}, 'jobs', 'list']); "
            "assert r.exit_code == 0, r.output; "
            "assert 'STATEOPS_HOME' not in os.environ and 'STATEOPS_CONFIG' not in os.environ")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("STATEOPS_")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
