"""A user's own job over nested and numeric columns (device readings), registered from outside StateOps by a config
file: the schema every numeric, nested and date type of Spark's DDL that a JSON input carries, the transformation a
5-minute window per device. The parser's tests read its input as they read the example jobs' (tests/spark/
test_line_parser.py)."""
from __future__ import annotations

import os

from pyspark.sql import DataFrame

READINGS = ("device_id STRING, reading_time TIMESTAMP, seq LONG, level INT, temperature DOUBLE, ratio FLOAT, "
            "price DECIMAL(12,4), ok BOOLEAN, day DATE, location STRUCT<lat: DOUBLE, lon: DOUBLE, label: STRING>, "
            "tags ARRAY<STRING>, attrs MAP<STRING, BIGINT>")


def device_windows(readings: DataFrame) -> DataFrame:
    """Per device and 5-minute window: readings, the highest temperature, the prices' sum, the tags seen."""
    from pyspark.sql import functions as F

    return (readings.groupBy(F.window("reading_time", "5 minutes"), "device_id")
            .agg(F.count(F.lit(1)).alias("readings"), F.max("temperature").alias("temperature_max"),
                 F.sum("price").alias("price_sum"), F.max("location.lat").alias("lat_max"),
                 F.sum(F.size("tags")).alias("tags"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "device_id", "readings", "temperature_max", "price_sum", "lat_max", "tags"))


def config(folder, kafka: str | None = None) -> str:
    """A config file in `folder` that defines the job `device_readings` (on the broker `kafka`'s topic `readings`
    when given); returns its path."""
    path = os.path.join(str(folder), "readings.toml")
    with open(path, "w") as handle:
        handle.write('[jobs.device_readings]\ntransformation = "tests.support.readings_job:device_windows"\n'
                     'output_mode = "update"\nmerge_keys = ["window_start", "window_end", "device_id"]\n'
                     'watermark_delay = "10 minutes"\nwatermark_min = "1 minute"\nwatermark_max = "2 hours"\n'
                     + (f'source = "kafka"\nkafka_bootstrap_servers = "{kafka}"\n' if kafka else "")
                     + f'[[jobs.device_readings.inputs]]\nname = "readings"\nschema = "{READINGS}"\n'
                     'time_column = "reading_time"\n')
    return path
