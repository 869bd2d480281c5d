"""Sensor tests' harness: the code location's sensors (stateops.dagster.definitions, with the real
`state_recovery` job) evaluated with Dagster's sensor context on a real instance, and the runs they request
executed in process the way the daemon would launch them."""
from dagster import RunRequest, SensorResult, build_sensor_context

from stateops.dagster.definitions import defs
from stateops.dagster.resources import default_resources

RUNBOOK_OP = "recover"  # the state_recovery op whose config is the runbook request


class Harness:
    def __init__(self, instance):
        self.instance = instance
        self.repo = defs.get_repository_def()

    def tick(self, sensor: str, cursor: str | None = None) -> SensorResult:
        with build_sensor_context(instance=self.instance, cursor=cursor, resources=default_resources(),
                                  repository_def=self.repo, sensor_name=sensor) as context:
            return self.repo.get_sensor_def(sensor)(context)

    def launch(self, request: RunRequest):
        """Run a requested run to its end, as the daemon's launcher would (same job, config and tags)."""
        return self.repo.get_job(request.job_name).execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=self.instance, raise_on_error=False)


# The sensor tests' config: user_activity on 4 partitions with a 2-hour delay, thresholds for small data.
SENSOR_JOB = "user_activity"
SENSOR_CONFIG = f"""
[jobs.{SENSOR_JOB}]
shuffle_partitions = 4
watermark_delay = "2 hours"
state_store = "rocksdb"   # the skew remediation repartitions, which Spark does on RocksDB state only

[audit.jobs.{SENSOR_JOB}]
skew_min_rows = 50        # the default (1000) calls a few hundred rows noise; this data is small
growth_min_rows = 100
growth_ratio = 1.5
"""
