"""What an entry point reads from the process environment, once: where the home is, which config file, every
typed setting of the core (stateops.settings) and the Spark session's. Built by a CLI command, the code
location's load, a Dagster run (stateops.dagster.resources), a sensor tick, a script or a test, and passed down:
below these, nothing reads the environment on its own (tests/unit/test_import_graph.py). The catalog is loaded
beside it, on first use, once.

Variables: STATEOPS_HOME, STATEOPS_CONTROL_HOME, STATEOPS_CONFIG (stateops.environment), the control plane's,
the runbook's, the progress buffer's and the webhook's (stateops.settings), STATEOPS_SPARK_MASTER,
STATEOPS_SPARK_CONF, STATEOPS_DELTA_WRITER (stateops.jobs.runtime.session); the AWS SDK's are read where every S3 client reads
them (stateops.storage.aws).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from stateops.environment import Locations
from stateops.layout import Layout
from stateops.control.settings import ControlSettings
from stateops.progress import FlushSettings
from stateops.recovery.settings import RecoverySettings
from stateops.relocation.marker import refuse_if_moved
from stateops.remediation.alerts import WebhookSettings
from stateops.settings import Settings
from stateops.storage.aws import extra_storage_options

from stateops.jobs.definition.catalog import Catalog
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.definition.spec import JobSpec


@dataclass
class Environment:
    layout: Layout
    config_path: str | None
    settings: Settings
    spark: SparkSettings
    # An entry point that starts a run, an audit or a runbook: its catalog's `${env:NAME}` references resolved.
    resolve_references: bool = False
    _catalog: Catalog | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, home: str | None = None, config_path: str | None = None,
                 layout: Layout | None = None, resolve_references: bool = False,
                 moved_home: bool = False) -> "Environment":
        """Everything read now; `home`/`layout` and `config_path` given win over STATEOPS_HOME and
        STATEOPS_CONFIG (the CLI's --home and --config, a Dagster resource's home). A home that was moved
        (stateops.relocation.marker) is refused in one line naming the new one, unless `moved_home` (the move
        command itself, finishing a move)."""
        found = Locations.read()
        layout = layout or Layout.of(home or found.home, found.control_home)
        if not moved_home:
            refuse_if_moved(layout.home)
        return cls(layout, config_path or found.config_path, read_settings(), SparkSettings.from_env(),
                   resolve_references)

    @property
    def catalog(self) -> Catalog:
        """The config file's jobs and sections, validated on first use and kept for this entry point (its
        references resolved then when `resolve_references`, else as written)."""
        if self._catalog is None:
            catalog = Catalog.load(self.layout, self.config_path)
            self._catalog = catalog.resolved() if self.resolve_references else catalog
        return self._catalog


def read_settings() -> Settings:
    """The core's settings from the environment, every variable read and checked now; STATEOPS_STORAGE_OPTIONS
    too, so a malformed one is refused before a command acts rather than at its first table."""
    extra_storage_options()
    return Settings(ControlSettings.from_env(), RecoverySettings.from_env(), FlushSettings.from_env(),
                    WebhookSettings.from_env())


def load_jobs(config_path: str | None = None, layout: Layout | None = None) -> dict[str, JobSpec]:
    """The jobs of a fresh catalog (`config_path`, default STATEOPS_CONFIG; `layout`, default STATEOPS_HOME):
    for scripts, benchmarks and tests, which are entry points of their own."""
    return dict(Environment.from_env(config_path=config_path, layout=layout).catalog.jobs)


def get_job(name: str, config_path: str | None = None, layout: Layout | None = None) -> JobSpec:
    """One job of a fresh catalog (see load_jobs)."""
    return Environment.from_env(config_path=config_path, layout=layout).catalog.job(name)
