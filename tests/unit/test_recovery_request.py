"""One recovery request (stateops.recovery.request.RecoveryRequest) from which both front ends are derived: every
field is an option of `stateops recover plan|run` (its flag, its description in the CLI's words) and a field of
the Launchpad's config (its name, its description in the Launchpad's words), and a refusal naming a field is
said with the flag by the CLI and with the field by Dagster."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from stateops.dagster.recovery.runbook import RecoveryConfig
from stateops.recovery.request import (RecoveryRequest, RequestFieldError, cli_words, described, launchpad_words,
                                       request_fields)
from stateops.cli.main import main
from stateops.cli.recover import plan_command, run_command

pytestmark = pytest.mark.unit


def _options(command) -> dict[str, object]:
    return {name: param for param in command.params for name in [param.name]}


def test_every_field_is_an_option_of_the_cli_with_its_flag_and_its_description():
    run, plan = _options(run_command), _options(plan_command)
    for name, info in request_fields().items():
        assert name in run, f"recover run has no option for {name}"
        assert (name in plan) == (name not in ("confirm", "dry_run")), name
        flag = info.json_schema_extra["flag"]
        if name in ("job", "dry_run"):  # the argument JOB, and --dry-run as a flag (the CLI's own help)
            continue
        assert flag in run[name].opts, (name, run[name].opts)
        assert run[name].help == described(name, cli_words())


def test_every_launchpad_field_is_the_requests_field_with_its_description():
    config = RecoveryConfig.model_fields
    for name, info in request_fields().items():
        assert (name in config) == info.json_schema_extra["launchpad"], name
        if name in config and name != "job":
            assert config[name].description == described(name, launchpad_words())
            assert config[name].default == info.default or info.is_required()


def test_a_refused_field_is_said_with_the_cli_flag_by_the_cli_and_by_its_name_by_dagster(tmp_path):
    with pytest.raises(RequestFieldError) as err:
        RecoveryRequest("user_activity", "rewind", to_batch="3")  # text where a whole number belongs
    refusal = err.value
    assert refusal.field == "to_batch" and "to_batch" in str(refusal) and "--to-batch" not in str(refusal)
    assert refusal.words(cli_words()).startswith("--to-batch")
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "recover", "plan", "user_activity", "--mode",
                                       "adjust"])  # no --watermark: refused in the CLI's words
    assert result.exit_code == 2 and result.output.startswith("Error: --watermark: is required for mode adjust")
    assert "watermark_delay" not in result.output and "\n" not in result.output.strip()
