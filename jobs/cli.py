"""The `stateops` command: the same operations as the Dagster UI, for scripts and other orchestrators.

Exit codes: 0 success; 1 the operation found errors (e.g. error findings), failed while acting (a lost lease,
an unreadable store, an archive that does not verify) or a query failed (one line; the full trace in the run's
log); 2 usage, configuration or a refusal (stateops.errors: each error class carries its code).
"""
from __future__ import annotations

import json
import uuid
from dataclasses import asdict, fields

import click

from stateops import control
from stateops.delta import open_table
from stateops.environment import Locations
from stateops.errors import StateOpsError
from stateops.layout import Layout

from jobs.audit_cli import audit
from jobs.catalog import Catalog
from jobs.cli_context import CliContext
from jobs.control_cli import COMMANDS as CONTROL_COMMANDS
from jobs.explain_cli import explain_key_command
from jobs.retention_cli import COMMANDS as RETENTION_COMMANDS
from jobs.failures import QueryFailed
from jobs.generator import DEMO_INPUT, GeneratorConfig, generate
from jobs.recover_cli import COMMANDS as RECOVERY_COMMANDS
from jobs.runner import MODES, RunResult, deadletter_query_name, run_job
from jobs.settings import settings_report
from jobs.spec import JobSpec


class StateOpsGroup(click.Group):
    """Turns a StateOpsError into a one-line message and its exit code (2 usage, configuration or refusal; 1 an
    operation that failed), a failed query into one line and exit code 1 (no traceback either way)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except StateOpsError as err:
            click.echo(f"Error: {err}", err=True)
            ctx.exit(err.exit_code)
        except QueryFailed as err:
            click.echo(f"Error: {err}", err=True)
            ctx.exit(1)


@click.group(cls=StateOpsGroup)
@click.option("--home", default=None,
              help="Storage root (landing, checkpoints, tables, ops). Env: STATEOPS_HOME. [default: .stateops]")
@click.option("--config", "config_path", default=None,
              help="TOML file with your jobs and per-job settings. Env: STATEOPS_CONFIG.")
@click.pass_context
def main(ctx: click.Context, home: str | None, config_path: str | None) -> None:
    """StateOps: run, audit and recover stateful Spark Structured Streaming jobs."""
    found = Locations.read()
    ctx.obj = CliContext(Layout.of(home or found.home, found.control_home), config_path or found.config_path)


@main.group()
def jobs() -> None:
    """List, describe and run the streaming jobs."""


@jobs.command("list")
@click.pass_obj
def jobs_list(obj: CliContext) -> None:
    for spec in obj.catalog.jobs.values():
        click.echo(f"{spec.name:16} {spec.output_mode:7} {spec.description}")


def describe(spec: JobSpec, catalog: Catalog) -> dict:
    """Everything an operator needs to find a job's data, and its effective settings, as plain data."""
    layout = catalog.layout
    settings = settings_report(spec, catalog)
    return {
        "name": spec.name,
        "description": spec.description,
        "source": spec.source,
        "inputs": [{"name": i.name, "landing": layout.landing(i.name), "schema": i.schema,
                    "time_column": i.time_column} for i in spec.inputs],
        "transformation": spec.transformation,
        "output_mode": spec.output_mode,
        "merge_keys": list(spec.merge_keys),
        "checkpoint": spec.checkpoint_path(layout),
        "output_table": layout.table(spec.sink_table),
        "deadletter": {"table": layout.deadletter_table(spec.name),
                       "checkpoint": layout.deadletter_checkpoint(spec.name),
                       "query_name": deadletter_query_name(spec.name)},
        "ops": {"dir": layout.ops_dir(spec.name), "progress_table": layout.ops_table("progress"),
                "actions_table": layout.ops_table("actions"), "overrides_table": layout.ops_table("overrides")},
        "watermark": {"columns": [i.time_column for i in spec.inputs], "delay": settings["watermark_delay"]["value"],
                      "min": spec.watermark_min, "max": spec.watermark_max},
        "future_tolerance": spec.future_tolerance,
        "shuffle_partitions": settings["shuffle_partitions"]["value"],
        "trigger": {"bounded": "availableNow",
                    "continuous": f"processingTime {settings['trigger_interval']['value']}",
                    "max_files_per_trigger": settings["max_files_per_trigger"]["value"]},
        "settings": settings,
    }


def _setting_line(name: str, entry: dict) -> str:
    """`value (source ...)` for one effective setting."""
    source = entry["source"]
    if source == "override":
        runbook = f", runbook {entry['runbook_id']}" if entry["runbook_id"] else ""
        source = f"override by {entry['actor']} at {entry['changed_at']}{runbook}: {entry['reason']}"
    elif source == "config file":
        source = f"config file {entry['file']}"
    extra = "".join(f"; {key}: {entry[key]}" for key in ("problem", "in_checkpoint", "note")
                    if entry.get(key) is not None)
    return f"{name:22} {entry['value']} ({source}{extra})"


@jobs.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def jobs_describe(obj: CliContext, name: str, as_json: bool) -> None:
    info = describe(obj.catalog.job(name), obj.catalog)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    settings = info.pop("settings")
    for key, value in info.items():
        click.echo(f"{key:18} {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    click.echo("effective settings:")
    for name, entry in settings.items():
        click.echo(f"  {_setting_line(name, entry)}")


def _summary(result: RunResult) -> str:
    state = ", ".join(f"{op['operator_name']}={op['num_rows_total']}" for op in result.state_operators)
    return (f"{result.job}: {result.batches} batches, {result.input_rows} input rows, {result.output_rows} rows "
            f"written, {result.deadletter_rows} dead letters (total {result.deadletter_total}), "
            f"state rows [{state}], watermark {result.watermark}, median batch {result.median_batch_ms} ms, "
            f"Delta version {result.delta_version}"
            + (f", stopped by {result.stop_reason}" + (" (a batch was interrupted)" if result.hard_stopped else "")
               if result.stop_reason else "")
            + (f", {result.progress_write_failures} progress rows NOT recorded" if result.progress_write_failures
               else "")
            + (f", {result.progress_gap_batches} batches of an earlier run have no progress row"
               if result.progress_gap_batches else ""))


@jobs.command("run")
@click.argument("name")
@click.option("--mode", type=click.Choice(MODES), default="bounded", show_default=True,
              help="bounded: process what has landed, then stop; continuous: run until stopped.")
@click.option("--max-seconds", type=float, default=None, help="Continuous mode: stop after this long.")
@click.option("--json", "as_json", is_flag=True, help="Print the run result as JSON.")
@click.option("--runbook-id", default=None, help="Start while this runbook holds the job's maintenance lock.")
@click.pass_obj
def jobs_run(obj: CliContext, name: str, mode: str, max_seconds: float | None, as_json: bool,
             runbook_id: str | None) -> None:
    """Run NAME once; refused (exit 2) while another run holds its lease or a runbook its maintenance lock."""
    from jobs.session import get_session

    spec, layout, run_id = obj.catalog.job(name), obj.layout, uuid.uuid4().hex
    control.check_can_start(layout, name, runbook_id=runbook_id)  # before a JVM starts; run_job decides
    # Spark's console output goes to the run's log (local homes), so the terminal shows only our lines.
    console_log = None if "://" in layout.home else layout.run_log(spec.name, run_id)
    result = run_job(get_session(console_log=console_log), spec, layout, mode=mode, max_seconds=max_seconds,
                     run_id=run_id, runbook_id=runbook_id)
    click.echo(json.dumps(asdict(result), default=str) if as_json else _summary(result))


def _generator_options(command):
    """One CLI option per GeneratorConfig field, so the two never drift apart."""
    for f in reversed(fields(GeneratorConfig)):
        command = click.option(f"--{f.name.replace('_', '-')}", f.name, type=type(f.default),
                               default=f.default, show_default=True, help=f.metadata["help"])(command)
    return command


@main.command("generate")
@_generator_options
@click.pass_obj
def generate_command(obj: CliContext, **knobs) -> None:
    """Write deterministic event files (and orders/payments) into the landing zone."""
    generated = generate(obj.layout, GeneratorConfig(**knobs))
    for source, count in generated.lines.items():
        click.echo(f"{source}: {count} lines in {len(generated.files[source])} files under "
                   f"{obj.layout.landing(source)}")


@main.command("demo")
@click.pass_obj
def demo(obj: CliContext) -> None:
    """Generate input, then run every job once (bounded), without Dagster, and show what they produced
    (`bash scripts/demo` does the same through the Dagster instance the UI serves, audits included)."""
    from jobs.session import get_session

    layout = obj.layout
    click.echo(f"StateOps demo under {layout.home}")
    generate(layout, DEMO_INPUT)
    spark = get_session()
    for spec in obj.catalog.jobs.values():
        result = run_job(spark, spec, layout)
        table = open_table(layout.table(spec.sink_table))
        click.echo(_summary(result))
        click.echo(f"  -> {layout.table(spec.sink_table)}: {table.count() if table else 0} rows")
    click.echo(f"Progress of every batch: {layout.ops_table('progress')}")
    click.echo("Next: stateops audit user_activity | stateops audit user_activity --fast | "
               "stateops explain-key order_payments --key o000001")


for command in CONTROL_COMMANDS:
    jobs.add_command(command)
main.add_command(explain_key_command)
for command in RETENTION_COMMANDS + RECOVERY_COMMANDS:
    main.add_command(command)
main.add_command(audit)
