"""The `stateops` command: the same operations as the Dagster UI, for scripts and other orchestrators.

Exit codes: 0 success; 1 the operation found errors (e.g. error findings), failed while acting (a lost lease,
an unreadable store, an archive that does not verify) or a query failed (one line; the full trace in the run's
log); 2 usage, configuration or a refusal (stateops.errors: each error class carries its code).
"""
from __future__ import annotations

import sys
from dataclasses import fields

import click

from stateops.delta import open_table
from stateops.errors import StateOpsError
from stateops.extras import require
from stateops.redaction import RedactingStream
from stateops.storage.failures import library_failure

from stateops.jobs.definition.environment import Environment
from stateops.jobs.demo.generator import DEMO_INPUT, GeneratorConfig, generate
from stateops.jobs.runtime.failures import QueryFailed

from stateops.cli.audit import audit
from stateops.cli.explain import explain_key_command
from stateops.cli.home import home_group
from stateops.cli.jars import jars_group
from stateops.cli.jobs import jobs_group, summary
from stateops.cli.recover import COMMANDS as RECOVERY_COMMANDS
from stateops.cli.retention import COMMANDS as RETENTION_COMMANDS


# The commands that only show the configuration read it as written (`${env:NAME}` shown, no variable needed);
# every other command acts on the jobs' files (runs, audits, runbooks, status, retention, archives): its catalog's
# references are resolved when it loads (stateops.references), so that it acts on the paths the runs use.
AS_WRITTEN = (("jobs", "list"), ("jobs", "describe"), ("generate",), ("jars",))
_COMMAND = "stateops.command"


class StateOpsGroup(click.Group):
    """Turns a StateOpsError into a one-line message and its exit code (2 usage, configuration or refusal; 1 an
    operation that failed), a failed query, and a store failing under a library's own client (delta-rs), into one
    line and exit code 1 (no traceback either way). Everything
    the command writes to stdout and stderr from Python passes through stateops.redaction (Spark's console
    output through stateops.jobs.runtime.session)."""

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        ctx.meta[_COMMAND] = (name, *rest[:1]) if isinstance(command, click.Group) else (name,)
        return name, command, rest

    def invoke(self, ctx):
        sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)  # for the process's life
        try:
            return super().invoke(ctx)
        except StateOpsError as err:
            click.echo(f"Error: {err}", err=True)
            ctx.exit(err.exit_code)
        except QueryFailed as err:
            click.echo(f"Error: {err}", err=True)
            ctx.exit(1)
        except Exception as err:  # a store failing under a library's own client (delta-rs): one line, exit 1
            line = library_failure(err)
            if line is None:
                raise
            click.echo(f"Error: {line}", err=True)
            ctx.exit(1)


@click.group(cls=StateOpsGroup)
@click.option("--home", default=None,
              help="Storage root (landing, checkpoints, tables, ops). Env: STATEOPS_HOME. [default: .stateops]")
@click.option("--config", "config_path", default=None,
              help="TOML file with your jobs and per-job settings. Env: STATEOPS_CONFIG.")
@click.pass_context
def main(ctx: click.Context, home: str | None, config_path: str | None) -> None:
    """StateOps: run, audit and recover stateful Spark Structured Streaming jobs."""
    command = ctx.meta.get(_COMMAND, ())
    as_written = any(command[:len(prefix)] == prefix for prefix in AS_WRITTEN)
    ctx.obj = Environment.from_env(home, config_path, resolve_references=not as_written,
                                   moved_home=command[:2] == ("home", "move") or command[:1] == ("jars",))


def _generator_options(command):
    """One CLI option per GeneratorConfig field, so the two never drift apart."""
    for f in reversed(fields(GeneratorConfig)):
        command = click.option(f"--{f.name.replace('_', '-')}", f.name, type=type(f.default),
                               default=f.default, show_default=True, help=f.metadata["help"])(command)
    return command


@main.command("generate")
@_generator_options
@click.option("--kafka", "bootstrap", metavar="HOST:PORT", default=None,
              help="Also produce every generated line, in file order, to the topic named after its input "
                   "(events, orders, payments; created with LogAppendTime when missing).")
@click.pass_obj
def generate_command(obj: Environment, bootstrap: str | None, **knobs) -> None:
    """Write deterministic event files (and orders/payments) into the landing zone."""
    if bootstrap:
        require("kafka", "--kafka (producing the generated lines to topics)")
    generated = generate(obj.layout, GeneratorConfig(**knobs))
    for source, count in generated.lines.items():
        click.echo(f"{source}: {count} lines in {len(generated.files[source])} files under "
                   f"{obj.layout.landing(source)}")
    if bootstrap:
        from stateops.jobs.demo import kafka_input

        kafka_input.wait_for_broker(bootstrap)
        kafka_input.create_topics(bootstrap, generated.files)
        for source, paths in generated.files.items():
            click.echo(f"{source}: {kafka_input.produce_files(bootstrap, source, paths)} records to topic {source} "
                       f"on {bootstrap}")


@main.command("demo")
@click.pass_obj
def demo(obj: Environment) -> None:
    """Generate input, then run every job once (bounded), without Dagster, and show what they produced
    (`bash scripts/demo` does the same through the Dagster instance the UI serves, audits included)."""
    from stateops.jobs.runtime.runner import run_job
    from stateops.jobs.runtime.session import get_session

    layout = obj.layout
    click.echo(f"StateOps demo under {layout.home}")
    generate(layout, DEMO_INPUT)
    spark = get_session(obj.spark)
    for spec in obj.catalog.jobs.values():
        result = run_job(spark, spec, layout, settings=obj.settings)
        table = open_table(spec.sink_path(layout))
        click.echo(summary(result))
        click.echo(f"  -> {spec.sink_path(layout)}: {table.count() if table else 0} rows")
    click.echo(f"Progress of every batch: {layout.ops_table('progress')}")
    click.echo("Next: stateops audit user_activity | stateops audit user_activity --fast | "
               "stateops explain-key order_payments --key o000001")


for command in (jobs_group, jars_group, home_group, audit, explain_key_command, *RETENTION_COMMANDS, *RECOVERY_COMMANDS):
    main.add_command(command)
