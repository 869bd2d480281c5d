"""Dagster resources: Spark (lazy, built by the one session factory) and the StateOps paths."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from dagster import ConfigurableResource
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from stateops.jobs.definition.environment import Environment
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.runtime.session import get_session, spark_conf
from stateops.layout import Layout
from stateops.redaction import SECRET_KEYS


class SparkResource(LazyPySparkResource):
    """The JVM starts on the first `.spark_session`, so runs that never touch Spark never start one.

    `spark_config` defaults to the session factory's settings (RocksDB, UTC, machine-sized shuffle
    partitions, the running interpreter for Python workers), shown as config in the UI and stored with every
    job's snapshot: without the settings holding secrets (the S3A keys from the AWS variables), which the
    factory adds from the run's own environment when it builds the session. The session is
    built by `stateops.jobs.runtime.session.get_session`, not by dagster-pyspark, so there is one way sessions are made
    (it also sets PYSPARK_PYTHON and checks Java); keys given here win over the factory's settings.
    """

    spark_config: dict[str, Any] = Field(default_factory=lambda: {
        key: value for key, value in spark_conf(SparkSettings.from_env()).items() if not SECRET_KEYS.search(key)})

    def _init_session(self) -> None:
        if self._spark_session is None:
            settings = replace(SparkSettings.from_env(), extra_conf=dict(self.spark_config))
            self._spark_session = get_session(settings)


class PathsResource(ConfigurableResource):
    """Where StateOps reads and writes (every path is derived from `home` by stateops.layout) and which config
    file defines its jobs."""

    home: str = Field(default="", description="StateOps root (local path or fsspec URL); empty: $STATEOPS_HOME "
                      "as the run's process sees it (read at run time, not when the definitions were loaded)")
    config: str = Field(default="", description="The StateOps config file; empty: $STATEOPS_CONFIG as the run's "
                        "process sees it (none: the built-in jobs only)")

    @property
    def layout(self) -> Layout:
        return Layout(self.home) if self.home else Layout.from_env()

    def environment(self) -> Environment:
        """Everything a run or a tick reads from the process environment, under this home and config file, read
        now: call it once per run or tick and pass it down (stateops.jobs.definition.environment). Runs and ticks
        act on the jobs: their `${env:NAME}` references are resolved (the definitions keep them as written)."""
        return Environment.from_env(layout=self.layout, config_path=self.config or None, resolve_references=True)


def default_resources(home: str | None = None, config: str | None = None) -> dict[str, ConfigurableResource]:
    """The resources every StateOps definition binds, keyed as the assets and ops ask for them; `home` and
    `config` given are fixed in the definitions (stateops.dagster.build_defs), else read by each run and tick."""
    return {"spark": SparkResource(), "paths": PathsResource(home=home or "", config=config or "")}
