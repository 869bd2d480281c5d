"""Scale benchmark: what a code location with many registered jobs costs, at 4, 100, 300 and 1,000 jobs.

A platform team registers every streaming job of the company in one config file. For each size N the
benchmark writes one config file with N - 4 copies of examples/engagement.toml's job under other names (plus
the 4 built-ins), and gives every job cheap artefacts without running Spark for any of them:

  checkpoint  tests/support/fake_checkpoint.py's FakeCheckpoint (checked against real Spark checkpoints by
              tests/unit/test_fake_checkpoint.py): its own query id, `--batches` committed batches with a
              watermark, one transformWithState operator with changelog files in 2 partitions
  progress    `--batches` rows per job in the progress ops table (stateops.progress.progress_row from a
              progress event shaped like Spark's, appended with stateops.progress.append)
  audits      `--audits` deep and as many fast audits per job in the audits ops table
              (stateops.audit.history.audit_rows of a real fast audit of the job's checkpoint)

Then it measures each figure in a fresh process (`python -m bench.bench_scale --measure WHAT`), so nothing
one measurement loaded or cached helps another:

  load          a new interpreter importing stateops.dagster.definitions and building its repository definition
                (`Definitions.get_repository_def()`), timed from outside the process, interpreter start and
                Dagster's own import included: what a code server does before it answers
  snapshot      then the repository's snapshot (RepositorySnap.from_def: every job, asset, check, schedule
                and sensor as the UI and the daemon get them), and the process's RSS afterwards (the code
                server's memory)
  <sensor>      `--ticks` ticks of each StateOps sensor on a real temporary Dagster instance, the first one
                included (a code server's first tick after it starts is a tick too): the slowest of them, the
                code location loaded first and not counted
  status        `stateops jobs status --json` for all jobs (the whole command, interpreter start included)
  retention     `stateops retention plan --json` (likewise)
  fast audits   the fast audit of every job in one process (stateops.audit.fast_audits: what
                `stateops audit JOB --fast` computes, for all jobs, reading each ops table once)

Growth per job = (seconds per job at the largest size) / (seconds per job at 100 jobs): at most 1.0 when a
figure grows at most linearly (fixed costs make it smaller).

  .venv/bin/python -m bench.bench_scale [--quick] [--sizes 4,100,300,1000]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Sequence

from bench.common import Report, machine, sensor_ticks, workdir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
SENSORS = ("state_skew_sensor", "state_growth_sensor", "query_health_sensor")
FIGURES = ("load", "snapshot", *SENSORS, "status", "retention", "fast_audits")
LABELS = {"load": "code location load", "snapshot": "repository snapshot", "state_skew_sensor": "skew tick", "state_growth_sensor": "growth tick",
          "query_health_sensor": "health tick", "status": "jobs status --json", "retention": "retention plan",
          "fast_audits": "fast audit, all jobs"}
BUILTIN_JOBS = 4
TEAMS = 25  # the generated jobs' owners: team:team_00 .. team:team_24
OPERATOR = "transformWithStateInPandasExec"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 4, 50, 100; 1 tick")
    parser.add_argument("--sizes", type=lambda s: tuple(int(x) for x in s.split(",")),
                        help="registered jobs, the 4 built-ins included (default 4,100,300,1000)")
    parser.add_argument("--batches", type=int, default=20, help="committed batches and progress rows per job")
    parser.add_argument("--audits", type=int, default=3, help="deep audits (and as many fast ones) per job")
    parser.add_argument("--ticks", type=int, default=3, help="ticks per sensor, the first included (the slowest is reported)")
    parser.add_argument("--workdir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--measure", choices=FIGURES, help=argparse.SUPPRESS)  # one figure, in this process
    args = parser.parse_args(argv)
    args.sizes = args.sizes or ((4, 50, 100) if args.quick else (4, 100, 300, 1000))
    if args.quick:
        args.ticks = 1
    if min(args.sizes) < BUILTIN_JOBS:
        parser.error(f"--sizes: every size includes the {BUILTIN_JOBS} built-in jobs")
    return args


# --- the home: config file, checkpoints, ops tables ---------------------------------------------------

def job_names(n: int) -> list[str]:
    return [f"engagement_{i:04d}" for i in range(n - BUILTIN_JOBS)]


def config_text(n: int) -> str:
    """examples/engagement.toml's job, once per generated name, each owned by one of TEAMS teams."""
    import tomllib

    with open(os.path.join(EXAMPLES, "engagement.toml"), "rb") as handle:
        (example,) = tomllib.load(handle)["jobs"].values()
    lines = []
    for i, name in enumerate(job_names(n)):
        table = {**example, "owners": [f"team:team_{i % TEAMS:02d}"],
                 "tags": {**example.get("tags", {}), "tier": "bench"}}
        lines.append(f"[jobs.{name}]")
        lines += [f"{key} = {_toml(value)}" for key, value in table.items() if key != "inputs"]
        for inp in table["inputs"]:
            lines.append(f"[[jobs.{name}.inputs]]")
            lines += [f"{key} = {_toml(value)}" for key, value in inp.items()]
        lines.append("")
    return "\n".join(lines)


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)  # strings, lists of strings and numbers read the same in TOML


def _progress_event(job: str, query_id: str, run_id: str, batch: int, at: dt.datetime) -> dict[str, Any]:
    """One micro-batch's progress event, shaped as Spark reports it (what the runner's listener gets)."""
    stamp = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    watermark = (at - dt.timedelta(minutes=10)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"id": query_id, "runId": run_id, "name": job, "timestamp": stamp, "batchId": batch,
            "numInputRows": 100, "batchDuration": 400, "durationMs": {"triggerExecution": 400, "addBatch": 300},
            "eventTime": {"watermark": watermark, "max": stamp},
            "stateOperators": [{"operatorName": OPERATOR, "numRowsTotal": 1000 + batch, "numRowsUpdated": 10,
                                "memoryUsedBytes": 4096, "numRowsDroppedByWatermark": 0,
                                "numShufflePartitions": 2}],
            "sources": [{"description": "FileStreamSource[landing/events]", "startOffset": {"logOffset": batch - 1},
                         "endOffset": {"logOffset": batch}, "numInputRows": 100}]}


def build_home(home: str, config_path: str, batches: int, audits: int) -> dict[str, int]:
    """Checkpoints, progress rows and audits for every job of the config file (no Spark); returns counts."""
    import pyarrow as pa

    from stateops.jobs.definition.catalog import Catalog
    from stateops import progress
    from stateops.audit import fast_audit
    from stateops.audit.history import AUDITS, AUDITS_SCHEMA, audit_rows
    from stateops.delta import append_rows
    from stateops.layout import Layout
    from tests.support.fake_checkpoint import FakeCheckpoint

    layout = Layout(home)
    catalog = Catalog.load(layout, config_path)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    first = now - dt.timedelta(minutes=batches)
    progress_rows, audit_table = [], []
    for name, spec in catalog.jobs.items():
        query_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"stateops-bench/{name}"))
        run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"stateops-bench/{name}/run"))
        checkpoint = FakeCheckpoint(spec.checkpoint_path(layout), query_id, partitions=2)
        for b in range(batches):
            at = first + dt.timedelta(minutes=b)
            checkpoint.batch(b, watermark_ms=int((at - dt.timedelta(minutes=10)).timestamp() * 1000),
                             timestamp_ms=int(at.timestamp() * 1000))
            progress_rows.append(progress.progress_row(_progress_event(name, query_id, run_id, b, at), name, run_id))
        checkpoint.operator(0, OPERATOR, partitions=2).store(0, partitions=2, changelog=range(1, batches + 1))
        report = fast_audit(checkpoint.path, job=name, history=[], progress=[], now=now)
        for a in range(audits):
            for kind in ("deep", "fast"):
                report.kind, report.audited_at = kind, now - dt.timedelta(hours=audits - a)
                audit_table += audit_rows(report, uuid.uuid4().hex)
    progress.append(layout, progress_rows)
    append_rows(layout.ops_table(AUDITS), pa.Table.from_pylist(audit_table, schema=AUDITS_SCHEMA))
    return {"jobs": len(catalog.jobs), "progress rows": len(progress_rows), "audit rows": len(audit_table)}


# --- one figure, measured in this (fresh) process ----------------------------------------------------

def _rss_mib() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(figure: str, ticks: int) -> dict[str, Any]:
    """Seconds of one figure (and, for the load, the RSS after it), in the process running this."""
    if figure in ("load", "snapshot"):
        from stateops.dagster.definitions import defs

        repo = defs.get_repository_def()
        if figure == "load":  # timed by the parent (_in_fresh_process), from the interpreter's start
            return {"assets": len(repo.assets_defs_by_key), "jobs": len(repo.job_names)}
        from dagster._core.remote_representation.external_data import RepositorySnap

        started = time.perf_counter()
        snap = RepositorySnap.from_def(repo)
        return {"seconds": time.perf_counter() - started, "rss_mib": _rss_mib(), "jobs": len(snap.job_datas or snap.job_refs or ())}
    if figure in SENSORS:
        timings = _ticks(figure, ticks)
        return {"seconds": max(timings), "first": timings[0], "median": statistics.median(timings)}
    if figure == "fast_audits":
        from stateops.jobs.definition.environment import Environment
        from stateops.jobs.definition.targets import resolve_audit
        from stateops.audit import fast_audits

        started = time.perf_counter()
        catalog = Environment.from_env().catalog
        targets = {name: resolve_audit(name, catalog) for name in catalog.jobs}
        reports = fast_audits(catalog.layout, {name: (t.checkpoint, t.thresholds) for name, t in targets.items()})
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "reports": len(reports)}
    command = {"status": ["jobs", "status", "--json"], "retention": ["retention", "plan", "--json"]}[figure]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "stateops.cli", *command], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"stateops {' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return {"seconds": seconds, "bytes": len(done.stdout)}


def _ticks(name: str, ticks: int) -> list[float]:
    timings, result = sensor_ticks(name, ticks, warm_up=False)
    if result.skip_reason and "no checkpoint" in result.skip_reason.skip_message:
        raise RuntimeError(f"{name} sees no checkpoint: {result.skip_reason.skip_message[:300]}")
    return timings


def _in_fresh_process(figure: str, home: str, config: str, ticks: int) -> dict[str, Any]:
    env = {**os.environ, "STATEOPS_HOME": home, "STATEOPS_CONFIG": config,
           "PYTHONPATH": os.pathsep.join([ROOT, EXAMPLES, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bench.bench_scale", "--measure", figure, "--ticks", str(ticks)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{figure} at {home}: exit {done.returncode}: {done.stderr.strip()[-2000:]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    return {"seconds": seconds, **measured} if figure == "load" else measured


# --- the run -----------------------------------------------------------------------------------------

def _fmt(seconds: float) -> str:
    return f"{seconds:.2f} s"


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    """`spark` is unused (nothing here starts a JVM); the bench runner passes it to every benchmark."""
    args = parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.ticks)))
        return Report("scale")
    report = Report("scale")
    results: dict[int, dict[str, dict[str, Any]]] = {}
    with workdir(args) as root:
        for n in args.sizes:
            home, config = os.path.join(root, f"home-{n}"), os.path.join(root, f"jobs-{n}.toml")
            with open(config, "w") as handle:
                handle.write(config_text(n))
            started = time.perf_counter()
            sys.path[:0] = [p for p in (EXAMPLES,) if p not in sys.path]
            counts = build_home(home, config, args.batches, args.audits)
            print(f"{n} jobs: {counts}, built in {time.perf_counter() - started:.1f} s", flush=True)
            results[n] = {}
            for figure in FIGURES:
                results[n][figure] = _in_fresh_process(figure, home, config, args.ticks)
                print(f"  {figure}: {results[n][figure]}", flush=True)
    sizes = list(args.sizes)
    rows = [[f"{n:,}", *[_fmt(results[n][f]["seconds"]) for f in FIGURES],
             f"{results[n]['snapshot']['rss_mib']:.0f} MiB"] for n in sizes]
    report.table(f"Cost by registered jobs ({args.batches} committed batches and progress rows, {args.audits} deep "
                 f"+ {args.audits} fast audits per job; each figure in a fresh process; a tick: the slowest of "
                 f"{args.ticks}, the first included)",
                 ("registered jobs", *[LABELS[f] for f in FIGURES], "code server RSS"), rows)
    base = 100 if 100 in sizes else next((n for n in sizes if n > BUILTIN_JOBS), None)
    top = max(sizes)
    if base is not None and top > base:
        def growth(value_of) -> str:
            return f"{(value_of(top) / top) / (value_of(base) / base):.2f}"
        report.table(f"Growth per job, {base:,} -> {top:,} jobs (seconds per job at {top:,} / at {base:,}; "
                     "at most 1.00 is at most linear)",
                     ("figure", "growth per job"),
                     [[LABELS[f], growth(lambda n, f=f: results[n][f]["seconds"])] for f in FIGURES]
                     + [["code server RSS", growth(lambda n: results[n]["snapshot"]["rss_mib"])]])
    report.note(f"machine: {machine()}")
    return report


if __name__ == "__main__":
    main()
