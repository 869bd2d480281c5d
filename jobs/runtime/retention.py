"""Retention's scope from the job catalog and the config file: each job's paths, the roots guard, the
policies (`[retention]` in STATEOPS_CONFIG, validated at load) and Spark's minBatchesToRetain as the jobs'
sessions set it (STATEOPS_SPARK_CONF, else Spark's default 100)."""
from __future__ import annotations

from stateops.errors import ConfigError
from stateops.retention import JobArea, Scope

from stateops.jobs.definition.environment import Environment
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.runtime.session import spark_conf

MIN_BATCHES = "spark.sql.streaming.minBatchesToRetain"
SPARK_DEFAULT_MIN_BATCHES = 100


def min_batches_to_retain(spark: SparkSettings) -> int:
    value = spark_conf(spark).get(MIN_BATCHES, str(SPARK_DEFAULT_MIN_BATCHES))
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"STATEOPS_SPARK_CONF.{MIN_BATCHES}", f"{value!r} is not a positive whole number",
                          "write a number of batches, e.g. \"100\" (Spark's default)")
    return number


def retention_scope(environment: Environment) -> Scope:
    """What retention may look at and act on: the catalog's jobs, its roots and policies, and the
    minBatchesToRetain of the entry point's Spark sessions."""
    catalog = environment.catalog
    layout, jobs = catalog.layout, catalog.jobs
    areas = {name: JobArea(job=name, checkpoint=spec.checkpoint_path(layout),
                           deadletter_checkpoint=layout.deadletter_checkpoint(name),
                           archive_root=spec.archive_path(layout),
                           sink_table=spec.sink_path(layout), deadletter_table=layout.deadletter_table(name))
             for name, spec in jobs.items()}
    return Scope(layout=layout, jobs=areas, roots=catalog.roots(), policies=catalog.retention,
                 min_batches_to_retain=min_batches_to_retain(environment.spark))
