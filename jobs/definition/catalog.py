"""The jobs StateOps runs, from three places, each defining jobs the same way (a JobSpec):

1. the four examples (stateops.jobs.examples.builtin; `[catalog] builtin_jobs = false` in the config file leaves them out);
2. the `stateops.jobs` entry point group: a package declares e.g.
   `[project.entry-points."stateops.jobs"] visits = "my_jobs.visits:JOBS"`, a JobSpec or a list of them;
3. `[jobs.<name>]` tables of the config file (STATEOPS_CONFIG) with `transformation = "module:function"`,
   inputs, watermark and output settings (stateops.jobs.definition.spec.spec_from_config).

A `[jobs.<name>]` table naming a job defined elsewhere overrides its settings instead, e.g.

    [jobs.user_activity]
    watermark_delay = "20 minutes"
    shuffle_partitions = 8

Every job is validated at load, its transformation included (it imports, its parameters fit), and so is
every other section of the config file (stateops.config). `Catalog.load` does all of it once per entry point
(a CLI invocation, the Dagster code location or a run, a sensor tick), and the result is passed down; a
sensor tick reuses the last tick's validation while the file is unchanged (`reusing_unchanged`).
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from importlib.metadata import entry_points
from typing import Any, Iterable, Iterator, Mapping

from stateops.audit.thresholds import Thresholds
from stateops.config import ConfigFile
from stateops.errors import ConfigError
from stateops.folders import JobFolders, check_folders
from stateops.layout import Layout
from stateops.references import checked_before_resolving
from stateops.remediation.policy import Policy
from stateops.retention.policy import Policies, load_policies
from stateops.roots import Roots

from stateops.jobs.definition import transformation
from stateops.jobs.definition.spec import JobSpec, resolved, spec_from_config, with_overrides
from stateops.jobs.examples.builtin import BUILTIN

ENTRY_POINT_GROUP = "stateops.jobs"


def _entry_point_jobs() -> Iterable[tuple[str, JobSpec]]:
    """(where it came from, spec) for every job the installed packages register."""
    for point in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {point.name} = {point.value!r} ({ENTRY_POINT_GROUP})"
        try:
            loaded = point.load()
        except Exception as err:  # noqa: BLE001 - any error while importing a package's code
            raise ConfigError(where, f"cannot be loaded: {type(err).__name__}: {err}",
                              "fix or uninstall the package that declares it") from None
        specs = (loaded,) if isinstance(loaded, JobSpec) else loaded
        if not isinstance(specs, (list, tuple)) or not all(isinstance(s, JobSpec) for s in specs):
            raise ConfigError(where, f"is {type(loaded).__name__}, not a JobSpec or a list of JobSpecs",
                              "point it to a stateops.jobs.definition.spec.JobSpec (or a list of them)")
        yield from ((where, spec) for spec in specs)


def _catalog_settings(config: ConfigFile) -> bool:
    """Whether the built-in examples are loaded (`[catalog] builtin_jobs`, default true)."""
    catalog = config.table("catalog")
    if set(catalog) - {"builtin_jobs"}:
        unknown = sorted(set(catalog) - {"builtin_jobs"})[0]
        raise ConfigError(f"catalog.{unknown}", "is not a catalog setting", "use builtin_jobs (or remove it)")
    builtin = catalog.get("builtin_jobs", True)
    if not isinstance(builtin, bool):
        raise ConfigError("catalog.builtin_jobs", f"{builtin!r} is not true or false", "write true or false")
    return builtin


def job_folders(spec: JobSpec, layout: Layout) -> JobFolders:
    """What of `spec` lies on storage (stateops.folders): a json job's landing folders, its table, checkpoint,
    archives."""
    landings = tuple((i.name, i.landing(layout)) for i in spec.inputs) if spec.source == "json" else ()
    return JobFolders(spec.name, landings, spec.sink_table, spec.sink_path(layout), spec.checkpoint_path(layout),
                      spec.archive_dir)


def _load_jobs(config: ConfigFile, layout: Layout) -> dict[str, JobSpec]:
    """All jobs by name, validated, with the config file's overrides applied, paths checked under `layout`."""
    defined: dict[str, tuple[str, JobSpec]] = {}
    sources = [("stateops.jobs.examples.builtin.BUILTIN", spec) for spec in BUILTIN] if _catalog_settings(config) else []
    sources += list(_entry_point_jobs())
    overrides = {}
    for name, table in config.table("jobs").items():
        if isinstance(table, dict) and "transformation" in table:
            sources.append((f"the config file's [jobs.{name}]", spec_from_config(name, table)))
        else:
            overrides[name] = table
    for where, spec in sources:
        if spec.name in defined:
            raise ConfigError(f"jobs.{spec.name}", f"is defined twice: by {defined[spec.name][0]} and by {where}",
                              "give one of them another name")
        defined[spec.name] = (where, spec)
    specs = {name: spec for name, (_, spec) in defined.items()}
    for name, values in overrides.items():
        if name not in specs:
            raise ConfigError(f"jobs.{name}", "is not a known job", f"use one of {sorted(specs)}, or define it "
                              'with transformation = "module:function" and its settings (docs/jobs.md, Your own jobs)')
        specs[name] = with_overrides(specs[name], values)
    for spec in specs.values():  # each validated as it was made (stateops.jobs.definition.spec.JobSpec)
        transformation.check(spec)  # the callable imports and binds (after the fields it depends on)
    check_folders([job_folders(spec, layout) for spec in specs.values()], layout)
    return specs


_REUSE: ContextVar[bool] = ContextVar("stateops_catalog_reuse", default=False)
_kept: dict[tuple[Layout, str | None], tuple[bytes, "Catalog"]] = {}


@contextmanager
def reusing_unchanged() -> Iterator[None]:
    """Inside the block, `Catalog.load` hands back the catalog it validated last in this process for the same
    home and config file when the file's bytes are unchanged (it still reads the file: an edit applies at the
    next load). For an entry point that runs again and again in one process, a sensor tick: at 1,000 jobs,
    parsing and validating an unchanged file took 0.6 s of every tick. Everywhere else (a CLI command, a run,
    the code location) a load validates afresh. A file that fails to load is never kept."""
    token = _REUSE.set(True)
    try:
        yield
    finally:
        _REUSE.reset(token)


def _file_bytes(path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


@dataclass(frozen=True)
class Catalog:
    """One entry point's configuration: the config file, every job it defines or overrides (validated, paths
    checked under `layout`), and the other sections, validated for every job at load so that a typo anywhere
    fails before anything runs."""

    layout: Layout
    config: ConfigFile
    jobs: Mapping[str, JobSpec]
    retention: Policies
    thresholds_by_job: Mapping[str | None, Thresholds]  # None: the defaults, for a job not configured
    policies: Mapping[str | None, Policy]

    @classmethod
    def load(cls, layout: Layout, config_path: str | None) -> "Catalog":
        content = _file_bytes(config_path) if _REUSE.get() else None
        kept = _kept.get((layout, config_path)) if content is not None else None
        if kept is not None and kept[0] == content:
            return kept[1]
        config = ConfigFile.load(config_path)
        try:
            jobs = _load_jobs(config, layout)
            config.check_job_names(jobs)
            thresholds = {name: Thresholds.from_config(config, name) for name in (None, *jobs)}
            policies = {name: Policy.from_config(config, name) for name in (None, *jobs)}
            catalog = cls(layout, config, jobs, load_policies(config, list(jobs)), thresholds, policies)
        except ConfigError as err:
            raise checked_before_resolving(err) from None
        if content is not None:
            _kept[(layout, config_path)] = (content, catalog)
        return catalog

    def resolved(self, env: Mapping[str, str] | None = None) -> "Catalog":
        """This catalog with every job's `${env:NAME}` references resolved (stateops.jobs.definition.spec
        .resolved), for an entry point that starts a run, an audit or a runbook, when it starts; ConfigError
        naming the key and the variable when one is not set. The catalog as loaded keeps the references."""
        return replace(self, jobs={name: resolved(spec, env) for name, spec in self.jobs.items()})

    def job(self, name: str) -> JobSpec:
        if name not in self.jobs:
            raise ConfigError("job", f"unknown job {name!r}", f"use one of {sorted(self.jobs)} (stateops jobs list)")
        return self.jobs[name]

    def thresholds(self, job: str | None) -> Thresholds:
        """The audit thresholds in force for `job` (parsed once, at load)."""
        return self.thresholds_by_job.get(job) or self.thresholds_by_job[None]

    def policy(self, job: str) -> Policy:
        """The job's remediation policy (parsed once, at load)."""
        return self.policies.get(job) or self.policies[None]

    def configured(self, job: str) -> Mapping[str, Any]:
        """The `[jobs.NAME]` table of the config file (what it sets for the job), empty when none."""
        return self.config.table("jobs").get(job, {})

    def roots(self) -> Roots:
        """The roots guard for every configured job (checkpoints configured outside the home included)."""
        return Roots.from_layout(self.layout, {name: spec.checkpoint_path(self.layout) for name, spec in self.jobs.items()},
                                 {name: spec.archive_dir for name, spec in self.jobs.items() if spec.archive_dir},
                                 {name: spec.sink_path(self.layout) for name, spec in self.jobs.items()},
                                 [inp.path for spec in self.jobs.values() if spec.source == "json"
                                  for inp in spec.inputs if inp.path])

