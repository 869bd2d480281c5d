"""Parse: the jobs' line parser against `from_json` and Spark's JSON source, on the same files.

  json:       Spark's JSON source (`readStream.schema(...).json(landing)`): the cheapest streaming read of the input,
              and the baseline of the ratios
  text:       the text source alone (`readStream.text(landing)`): the read every line-keeping parse starts from
  from_json:  text + `from_json` in PERMISSIVE mode (a java.io.InputStreamReader per row)
  lineparser: text + StateOps' LineParser (`stateops.lineparse.parse_rows`: the JSON source's own parser over the
              line's bytes), exploded as a job's query explodes it: how a job's query parses

Every side streams the same user_activity landing files (one per micro-batch) into Spark's `noop` sink, on fresh
checkpoints, alternating A B C D D C B A; per side the median `batchDuration` of its micro-batches (each run's
first excluded) and its ratio to the JSON source's. Then the oracle: the rows LineParser reads from every file
against the JSON source's, as multisets (`exceptAll` both ways): they must be none.

  .venv/bin/python -m bench.bench_parse [--quick] [--sizes 20000,200000] [--files 6] [--repeats 2]
"""
from __future__ import annotations

import os
import statistics
from typing import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench.common import Report, fmt_ms, fmt_ratio, machine, parse_args, schedule, workdir

SIDES = ("json", "text", "from_json", "lineparser")


def _frames(spark, landing: str, schema: str) -> dict[str, DataFrame]:
    from stateops.lineparse import json_source, parse_rows

    def text() -> DataFrame:
        return spark.readStream.option("maxFilesPerTrigger", 1).text(landing)

    return {
        "json": json_source(spark.readStream, schema).option("maxFilesPerTrigger", 1).json(landing),
        "text": text(),
        "from_json": text().select(F.explode(F.array(F.from_json("value", schema, {"mode": "PERMISSIVE"})))
                                   .alias("row")).select("row.*"),
        "lineparser": text().select(F.explode_outer(parse_rows(spark, F.col("value"), schema)).alias("row"))
        .select("row.*"),
    }


def _batches(frame: DataFrame, checkpoint: str, name: str) -> list[int]:
    query = (frame.writeStream.format("noop").queryName(name).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return [p["batchDuration"] for p in query.recentProgress if p["numInputRows"] > 0][1:]


def _differing_rows(spark, landing: str, schema: str) -> int:
    from stateops.lineparse import json_source, parse_rows

    source = json_source(spark.read, schema).json(landing)
    parsed = spark.read.text(landing).select(F.explode(parse_rows(spark, F.col("value"), schema)).alias("row")) \
        .select("row.*")
    return source.exceptAll(parsed).count() + parsed.exceptAll(source).count()


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    from bench.bench_throughput import make_input
    from stateops.jobs.definition.environment import get_job
    from stateops.jobs.definition.spark_settings import SparkSettings
    from stateops.jobs.runtime.session import get_session

    args = parse_args(__doc__.split("\n")[0], argv)
    files, repeats = args.files, args.repeats
    spark = spark or get_session(SparkSettings.from_env())
    spec = get_job("user_activity")
    inp = spec.inputs[0]
    report = Report("parse", f"Parse: {machine()}")
    rows = []
    with workdir(args) as root:
        for index, size in enumerate(args.sizes):
            source, _ = make_input(root, spec, size, files, args.users)
            landing = inp.landing(source)
            durations: dict[str, list[int]] = {side: [] for side in SIDES}
            for run, side in enumerate(schedule(SIDES, index, repeats)):
                frame = _frames(spark, landing, inp.schema)[side]
                durations[side] += _batches(frame, os.path.join(root, f"ck-{size}-{side}-{run}"), f"parse_{side}")
                print(f"  {size:>8} {side:<10} batches ms {durations[side]}", flush=True)
            baseline = statistics.median(durations["json"])
            differing = _differing_rows(spark, landing, inp.schema)
            for side in SIDES:
                median = statistics.median(durations[side])
                rows.append([f"{size:,}", side, fmt_ms(median), fmt_ratio(median / baseline),
                             len(durations[side]), differing if side == "lineparser" else None])
    report.table(f"median micro-batch (ms) of {files} files of user_activity events, {repeats} run(s) per side; ratio "
                 "= side / Spark's JSON source; differing rows = rows read by one and not the other (multisets)",
                 ["events/batch", "side", "median ms", "ratio", "batches", "differing rows"], rows)
    return report


if __name__ == "__main__":
    main()
