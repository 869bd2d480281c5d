"""The CLI's exit code comes from the error class: 2 when nothing was done (usage, configuration, a refusal),
1 when an operation failed while acting. Each error is raised inside a command of the real `stateops` group."""
from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from stateops.cli.main import main
from stateops.audit.deep import StateReadError
from stateops.checkpoints.checkpoint import NotACheckpointError
from stateops.control.fence.lease import LeaseLostError
from stateops.control.maintenance import MaintenanceLockedError
from stateops.errors import ConfigError, StateOpsError
from stateops.checkpoints.archive import ArchiveError
from stateops.recovery.model import RecoveryRefused
from stateops.remediation.signals import OpsTableError
from stateops.roots import OutsideRootsError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("err, code", [
    (ConfigError("jobs.x.checkpoint", "'/' is a filesystem root", "give the job a folder of its own"), 2),
    (StateOpsError("--batch-id needs the deep audit"), 2),
    (RecoveryRefused("user_activity: the same delay"), 2),
    (OutsideRootsError("refusing /etc for job x: outside the roots"), 2),
    (NotACheckpointError("/tmp/x is not a checkpoint"), 2),
    (MaintenanceLockedError.__new__(MaintenanceLockedError), 2),
    (StateReadError("cannot read operator 0 store default at batch 3"), 1),
    (OpsTableError("ops/tables/progress cannot be read"), 1),
    (ArchiveError("the archive does not verify"), 1),
    (LeaseLostError.__new__(LeaseLostError), 1),
], ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v))
def test_the_error_class_carries_the_exit_code(tmp_path, monkeypatch, err, code):
    @click.command("boom")
    def boom() -> None:
        raise err

    monkeypatch.setitem(main.commands, "boom", boom)
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "boom"])
    assert result.exit_code == code and result.output.startswith("Error: ") and "Traceback" not in result.output
