"""Named homes built once per test process and copied per test: the input a test starts from and what the
jobs made of it (checkpoints, Delta tables, progress rows), so a test pays for its own steps only.

A scenario is built at a fixed path of the process's store (`live/<name>`), moved aside (`built/<name>`), and
each test gets a fresh copy at that same path: the file source's log names its input files by absolute path,
so a copy elsewhere would read every file again, while a copy put back where it was built restarts like the
original (modification times kept: the file source orders files by them, and the oracle dates arrivals by
them). One test at a time uses a worker's copy. Builders use the built-in catalog (no STATEOPS_CONFIG) and the
test process's Spark session.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from typing import Callable

from stateops.jobs.definition.environment import read_settings
from stateops.jobs.definition.catalog import Catalog
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.layout import Layout

# The small input of the runbook and recovery tests: late and duplicate events, a few malformed lines, four
# files of 15 minutes each (one micro-batch each).
SMALL = GeneratorConfig(events=400, files=4, users=30, late_share=0.05, duplicate_share=0.05, malformed_share=0.02,
                        minutes_per_file=15, seed=43)


def builtin(layout: Layout, job: str):
    """A built-in job's spec for `layout`, whatever STATEOPS_CONFIG the test set."""
    return Catalog.load(layout, None).job(job)


def more_input(layout: Layout, hour: int, seed: int, files: int = 2, base: GeneratorConfig = SMALL) -> None:
    """New input after a scenario's: `files` more files of `base`'s kind (as many events per file), starting at
    `hour` o'clock."""
    generate(layout, replace(base, files=files, events=base.events * files // base.files, seed=seed,
                             start=f"2026-01-01T{hour:02d}:00:00+00:00"))


def _run(spark, layout: Layout, *jobs: str) -> None:
    from stateops.jobs.runtime.runner import run_job

    for job in jobs:
        run_job(spark, builtin(layout, job), layout, settings=read_settings())


@dataclass(frozen=True)
class Scenario:
    build: Callable[[object, Layout], None]  # (spark, layout at the live path)
    doc: str


SCENARIOS: dict[str, Scenario] = {
    "user_activity_small": Scenario(
        lambda spark, layout: (generate(layout, SMALL), _run(spark, layout, "user_activity")),
        "SMALL's four files, user_activity run once over them (bounded): four committed batches"),
}


class Store:
    """One test process's scenarios: built on first use, then copied per test."""

    def __init__(self, root: str):
        self.root = root

    def copy(self, name: str, spark: Callable[[], object]) -> Layout:
        """A fresh copy of a named scenario (SCENARIOS)."""
        if name not in SCENARIOS:
            raise KeyError(f"no scenario {name!r}: one of {sorted(SCENARIOS)}")
        return self.home(name, lambda layout: SCENARIOS[name].build(spark(), layout))

    def home(self, name: str, build: Callable[[Layout], None]) -> Layout:
        """A fresh copy of the home `build` made under this name (built on the first call)."""
        live, built = os.path.join(self.root, "live", name), os.path.join(self.root, "built", name)
        if not os.path.isdir(built):
            shutil.rmtree(live, ignore_errors=True)
            build(Layout(live))
            os.makedirs(os.path.dirname(built), exist_ok=True)
            os.rename(live, built)
        shutil.rmtree(live, ignore_errors=True)
        shutil.copytree(built, live, symlinks=True)
        return Layout(live)


# The input of the tests with the whole home on an S3 API (moto's server): five files of 20 minutes.
S3_INPUT = GeneratorConfig(events=900, files=5, users=80, late_share=0.04, duplicate_share=0.06, malformed_share=0.03,
                           orders=140, minutes_per_file=20, seed=13)


class S3Store:
    """Homes on an S3 API (tests/e2e/conftest.py `s3_homes`), built once per module and restored per test, as
    `Store` does on disk: a job run over S3_INPUT (five files) at `<prefix>/<job>` (the state store snapshotting
    every two deltas, so retention has history to remove), kept aside at `<prefix>/.built/<job>` by server-side
    copies, and copied back to the same place for each test (the file source's log names its input by URL).
    Eight files were tried: every test then archived and restored more objects, and the module took longer
    than a home built per test."""

    def __init__(self, homes, spark):
        self.homes, self.spark, self.batches = homes, spark, {}

    def restore(self, job: str, store: str | None = None) -> tuple[Layout, int]:
        """A fresh copy of `job`'s home (built on the first call; on `store` when given, else the job's own) and how
        many batches its run committed."""
        from tests.support.servers.moto import copy_prefix

        name = f"{job}-{store}" if store else job
        live, built = f"{self.homes.prefix}/{name}", f"{self.homes.prefix}/.built/{name}"
        layout = Layout.of(self.homes.url(name))
        if name not in self.batches:  # the module's bucket is new: nothing under `live` yet
            generate(layout, S3_INPUT)
            from stateops.jobs.runtime.runner import run_job
            from tests.support.spark_confs import sql_confs

            with sql_confs(self.spark, {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"}):
                spec = builtin(layout, job)
                self.batches[name] = run_job(self.spark, replace(spec, state_store=store or spec.state_store), layout,
                                             settings=read_settings()).batches
            copy_prefix(self.homes.env, self.homes.bucket, live, built)
        else:
            copy_prefix(self.homes.env, self.homes.bucket, built, live)
        return layout, self.batches[name]


# The Kafka jobs' input: the generator's lines produced file by file, each input to the topic of its name, plus
# one record of invalid UTF-8 on `events`; read KAFKA_PER_TRIGGER records per micro-batch.
KAFKA_INPUT = GeneratorConfig(events=1200, files=4, users=120, late_share=0.05, late_minutes=90, duplicate_share=0.05,
                              malformed_share=0.03, future_share=0.02, orders=120, seed=21, minutes_per_file=20)
KAFKA_TOPICS = ("events", "orders", "payments")
KAFKA_BAD_BYTES = b'{"event_id": "e-\xff", "user_id": "u-1"} \xc3\x28'
KAFKA_PER_TRIGGER = "350"


# The Kafka module's user_activity home (tests/spark/conftest.py kafka_homes) ends in a repartition, which Spark does
# on RocksDB state only: that chain runs on RocksDB (the job's own store, memory, in the Kafka store switch test).
KAFKA_CHAIN_STORE = "rocksdb"


def rocksdb_config(folder, *jobs: str) -> str:
    """A config file in `folder` that puts `jobs` on RocksDB: for the tests of what RocksDB's own files or Spark's
    RocksDB-only tools do (user_activity and order_payments run in memory: jobs/examples/builtin.py)."""
    path = os.path.join(str(folder), "rocksdb.toml")
    with open(path, "w") as handle:
        handle.write("".join(f'[jobs.{job}]\nstate_store = "rocksdb"\n\n' for job in jobs))
    return path


def kafka_config(folder, bootstrap: str, job: str, state_store: str | None = None) -> str:
    """A config file in `folder` that makes `job` read the broker's topics, KAFKA_PER_TRIGGER records per batch (on
    `state_store` when given)."""
    path = os.path.join(str(folder), "kafka.toml")
    with open(path, "w") as handle:
        handle.write(f'[jobs.{job}]\nsource = "kafka"\nkafka_bootstrap_servers = "{bootstrap}"\n'
                     f'kafka_options = {{ maxOffsetsPerTrigger = "{KAFKA_PER_TRIGGER}" }}\n'
                     + (f'state_store = "{state_store}"\n' if state_store else ""))
    return path


# Seed 13: the second file of every input (events, orders, payments) holds poison rows.
ORACLE_INPUT = GeneratorConfig(events=1800, files=6, users=250, hot_key_share=0.02, late_share=0.04,
                               late_minutes=90, duplicate_share=0.06, malformed_share=0.03, future_share=0.02, orders=160,
                               seed=13, minutes_per_file=20)


# The demo on a reduced input (a few hundred lines; scripts/demo's DEMO_INPUT is about 9,000).
DEMO_INPUT_SMALL = GeneratorConfig(events=500, files=3, users=60, minutes_per_file=30, hot_key_share=0.05,
                                   late_share=0.03, duplicate_share=0.05, malformed_share=0.01, orders=60, seed=42)
