"""A user's job over the demo's events as the TOML a user writes (`--config`): tests that run a JobSpec in process
and then ask the CLI about it."""
from __future__ import annotations

import os

from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.examples.builtin import EVENTS


def events_job_config(folder, spec: JobSpec) -> str:
    """`folder`/stateops.toml declaring `spec` (transformation, output mode, watermark bounds, partitions) over the
    events input; its path."""
    path = os.path.join(str(folder), "stateops.toml")
    with open(path, "w") as out:
        out.write(f"""
[jobs.{spec.name}]
transformation = "{spec.transformation}"
output_mode = "{spec.output_mode}"
watermark_delay = "{spec.watermark_delay}"
watermark_min = "{spec.watermark_min}"
watermark_max = "{spec.watermark_max}"
shuffle_partitions = {spec.shuffle_partitions}
[[jobs.{spec.name}.inputs]]
name = "events"
schema = "{EVENTS.schema}"
time_column = "{EVENTS.time_column}"
""")
    return path
