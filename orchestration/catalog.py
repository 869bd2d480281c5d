"""The jobs of a code location, loaded once when its definitions are built (stateops.dagster.build_defs), and the
catalog a run or a schedule tick sees: each is an entry point of its own, and `catalog_for` loads the catalog
once for it, under the home and config file of its paths resource, from the config file as it is then (the set
of jobs stays the code location's).

The code server evaluates schedule ticks again and again (with 1,000 jobs, a thousand hourly audit schedules):
an unchanged config file is validated once, not at every tick (stateops.jobs.definition.catalog.reusing_unchanged),
and the catalog validated when the definitions were built is the one the first tick reuses (at 1,000 jobs a
load takes about 0.4 s of a tick's 1 s); a run's own process validates it when it starts.
"""
from __future__ import annotations

from typing import Iterable

from stateops.errors import ConfigError
from stateops.jobs.definition.catalog import Catalog, reusing_unchanged
from stateops.jobs.definition.environment import Environment
from stateops.jobs.definition.spec import JobSpec


def load_catalog(config_path: str | None = None, home: str | None = None) -> Catalog:
    """The catalog of the config file (`config_path`, else $STATEOPS_CONFIG) under `home` (else $STATEOPS_HOME),
    validated now."""
    with reusing_unchanged():
        return Environment.from_env(home=home, config_path=config_path).catalog


def load_specs(config_path: str | None = None, home: str | None = None,
               jobs: Iterable[str] | None = None, catalog: Catalog | None = None) -> dict[str, JobSpec]:
    """The jobs of the config file (`config_path`, else $STATEOPS_CONFIG) under `home` (else $STATEOPS_HOME),
    validated now (or of `catalog`, already loaded); `jobs`: only those (each must be one of them)."""
    catalog = catalog or load_catalog(config_path, home)
    if jobs is None:
        return dict(catalog.jobs)
    unknown = sorted(set(jobs) - set(catalog.jobs))
    if unknown:
        raise ConfigError("jobs", f"names {', '.join(map(repr, unknown))}, not a job of the config file",
                          f"use some of {sorted(catalog.jobs)} (stateops jobs list), or leave jobs out for all")
    return {name: spec for name, spec in catalog.jobs.items() if name in set(jobs)}


def catalog_for(environment: Environment) -> Catalog:
    """The catalog a run or tick sees (call once per run or tick and pass it down)."""
    with reusing_unchanged():
        return environment.catalog
