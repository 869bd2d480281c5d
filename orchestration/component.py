"""`StateOpsComponent`: StateOps in a `dg` project, declared in YAML (docs/dagster-project.md).

    # defs/stateops/defs.yaml   (dg scaffold defs stateops.dagster.StateOpsComponent stateops)
    type: stateops.dagster.StateOpsComponent
    attributes:
      config_path: stateops.toml                          # relative to this folder
      home: "{{ env('STATEOPS_HOME', '.stateops') }}"     # relative: to the project's root
      jobs: [user_activity]                                # optional: only these (default all)

It builds what stateops.dagster.build_defs builds for that config file and home. A config error fails the load
(`dg check defs`, the code server) with the one line the CLI gives: the field and the fix.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from dagster import Definitions
from dagster._core.errors import DagsterInvalidDefinitionError
from dagster.components import (Component, ComponentLoadContext, Model, Resolvable, Scaffolder, ScaffoldRequest,
                                scaffold_component, scaffold_with)
from pydantic import Field

from stateops.errors import ConfigError

from stateops.dagster.factory import build_defs
from stateops.storage import is_url

CONFIG_FILE = "stateops.toml"
STARTER_CONFIG = '''# StateOps config file (docs/configuration.md): your streaming jobs, audit thresholds, remediation policies
# and retention. Without any [jobs.NAME] table the four built-in example jobs are loaded; set
# `builtin_jobs = false` to leave them out once your own jobs are here.
[catalog]
builtin_jobs = true

# Your own job (docs/jobs.md, Your own jobs): a transformation on the code location's Python path, its inputs,
# watermark and output settings, e.g.
#
# [jobs.visits]
# transformation = "my_project.visits:visits"
# inputs = [{ name = "events", source = "json", schema = "user_id STRING, ts TIMESTAMP" }]
# watermark_column = "ts"
# watermark_delay = "10 minutes"
# key_columns = ["user_id"]
# output_mode = "update"
'''


class StateOpsScaffolder(Scaffolder):
    """`dg scaffold defs stateops.dagster.StateOpsComponent NAME`: a defs.yaml and a starter config file."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        config = Path(request.target_path) / CONFIG_FILE
        if not config.exists():
            config.write_text(STARTER_CONFIG)
        scaffold_component(request, {"config_path": CONFIG_FILE, "home": "{{ env('STATEOPS_HOME', '.stateops') }}"})


@scaffold_with(StateOpsScaffolder)
class StateOpsComponent(Component, Model, Resolvable):
    """StateOps' streaming jobs, audits, runbook, retention, schedules and sensors for one config file and home."""

    config_path: Optional[str] = Field(
        None, description="The StateOps config file, relative to this defs.yaml's folder (default: "
                          "$STATEOPS_CONFIG, else the built-in jobs only)")
    home: Optional[str] = Field(
        None, description="Where StateOps keeps checkpoints, tables and ops tables: a local path (relative: to the "
                          "project's root) or an fsspec URL (default: $STATEOPS_HOME, else ./.stateops)")
    jobs: Optional[list[str]] = Field(None, description="Only these jobs of the config file (default: all)")

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        config = str((Path(context.path) / self.config_path).resolve()) if self.config_path else None
        home = self.home
        if home and not is_url(home) and not Path(home).is_absolute():
            home = str((Path(context.project_root) / home).resolve())
        try:
            return build_defs(config_path=config, home=home or None, jobs=self.jobs)
        except ConfigError as err:  # the CLI's line, not a traceback through the component loader
            raise DagsterInvalidDefinitionError(f"StateOps: {err}") from None
