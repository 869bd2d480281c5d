"""Support code of the tests, the benchmarks and scripts/ui-check: the one place helpers live.

- servers/   real servers on loopback, each started as its users start it: moto's S3 server (moto), a Kafka
             broker (kafka, via scripts/kafka), PostgreSQL (postgres), a Spark standalone cluster
             (spark_cluster), a webhook receiver (webhook), dagster-webserver + headless Chromium (browser);
             ports picks free loopback ports.
- oracles:   oracle (the plain-Python batch recomputation every streaming output is judged by),
             engagement_oracle (the example user job's), delta_rows (a Delta table read back as tuples),
             trees (sha256 of every file under a root: "untouched" checks).
- builders:  scenarios (named inputs and homes built once per test session, copied per test),
             fake_checkpoint (checkpoint files without Spark), audit_queries (small real queries for the audit
             tests), retention_history (checkpoint histories for retention).
- harness:   kill_trials (kill -9 of `stateops jobs run` at a fault point or at random, and the counts),
             faults/ (the fence trials: a fault proxy per process in front of the S3 server, bucket versions as
             history, freezes of a process group or its Python alone, inotify on a local home, seeded schedules,
             the trial driver and its invariants), lease_race (two processes racing for one lease),
             sensor_harness (sensors ticked and their runs launched as the daemon would), runbook_env (the
             runbook's timing for tests), tiers (what the default run and the long tier each do),
             wheel_env and install_ends (StateOps installed from its wheel, beside the project's dependencies
             or resolved to either end of its ranges), fetched_jars (a jars folder as a fetch leaves it).

Fixtures live only in conftest.py files; test modules import from here, never from each other
(tests/unit/test_import_graph.py).
"""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
