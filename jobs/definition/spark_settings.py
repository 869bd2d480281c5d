"""The Spark session's settings, read from the environment by the entry point (stateops.jobs.definition.environment):
STATEOPS_SPARK_MASTER, STATEOPS_SPARK_CONF (a JSON object of Spark settings), STATEOPS_DELTA_WRITER, STATEOPS_JARS
(the folder of the pinned JVM jars, stateops.jvm.jars). The session factory (stateops.jobs.runtime.session) turns
them into Spark's configuration."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from stateops.environment import text
from stateops.errors import ConfigError
from stateops.jvm.jars import JarsFolder, default_folder

from stateops.jobs.definition.spec import default_shuffle_partitions

DELTA_WRITERS = ("auto", "delta-rs", "spark")


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[*]"
    app_name: str = "stateops"
    shuffle_partitions: int = 4
    extra_conf: dict = field(default_factory=dict)
    delta_writer: str = "auto"
    jars: JarsFolder = field(default_factory=lambda: JarsFolder(default_folder(), "default"))

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    def writer_in_force(self, spark_jars: bool) -> tuple[str, str]:
        """The Delta writer the jobs use, and why (shown by `stateops jobs describe`). `auto` (the default): delta-rs
        on a local master, where it commits a micro-batch in a fraction of Delta's Spark writer's time; Delta's
        Spark writer on a cluster master, where the executors write the files and the driver holds no batch
        (docs/design.md, "Which Delta writer"). `spark_jars`: delta-spark is on the classpath."""
        if self.delta_writer != "auto":
            return self.delta_writer, f"STATEOPS_DELTA_WRITER={self.delta_writer}"
        if self.local:
            return "delta-rs", f"auto: local master {self.master}"
        if not spark_jars:
            return "delta-rs", (f"auto: cluster master {self.master}, but the delta-spark jars are not on the "
                                "classpath (`stateops jars fetch` fetches them)")
        return "spark", f"auto: cluster master {self.master}"

    @classmethod
    def from_env(cls) -> "SparkSettings":
        raw = text("STATEOPS_SPARK_CONF") or ""
        try:
            extra = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as err:
            raise ConfigError("STATEOPS_SPARK_CONF", f"is not valid JSON ({err})",
                              'write a JSON object, e.g. {"spark.executor.memory": "4g"}') from None
        if not isinstance(extra, dict):
            raise ConfigError("STATEOPS_SPARK_CONF", "is not a JSON object",
                              'write a JSON object, e.g. {"spark.executor.memory": "4g"}')
        writer = text("STATEOPS_DELTA_WRITER") or "auto"
        if writer not in DELTA_WRITERS:
            raise ConfigError("STATEOPS_DELTA_WRITER", f"{writer!r} is not a Delta writer",
                              f"use one of {', '.join(DELTA_WRITERS)}")
        return cls(master=text("STATEOPS_SPARK_MASTER") or "local[*]",
                   shuffle_partitions=default_shuffle_partitions(), extra_conf=extra, delta_writer=writer,
                   jars=JarsFolder.of())
