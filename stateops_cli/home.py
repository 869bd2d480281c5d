"""`stateops home move --to URL [--confirm] [--stop] [--json]`: move the home, with every job's state, to other storage
(stateops.relocation). Without --confirm: the plan, nothing changed. With it: the move (lock, copy, rewrite, verify,
mark, unlock), journaled in the new home; run it again to resume one that stopped.

Exit codes as everywhere: 0 planned or moved, 1 a step failed (run again to resume), 2 refused (one line: a running
job without --stop, a destination in use, a job configured outside the home, ...).
"""
from __future__ import annotations

import json
import sys

import click

from stateops.control import current_lease, default_actor
from stateops.layout import Layout
from stateops.relocation.executor import Move
from stateops.relocation.marker import HomeMovedError, moved
from stateops.relocation.plan import MoveRefused, make_plan

from stateops.jobs.definition.environment import Environment


@click.group("home")
def home_group() -> None:
    """The home: move it, with every job's state, to other storage."""


def _reporter(as_json: bool):
    """Each step's events: JSON lines on stdout (--json), else lines on stderr, the copy's progress on one line of
    a terminal."""
    terminal = sys.stderr.isatty()

    def report(step: str, event: dict) -> None:
        if as_json:
            click.echo(json.dumps({"step": step, **event}, default=str))
            return
        if event.get("phase") == "progress":
            line = (f"  copied {event['files']:,}/{event['of_files']:,} files, {event['bytes'] / 2**20:,.1f}/"
                    f"{event['of_bytes'] / 2**20:,.1f} MiB, {event['bytes_per_second'] / 2**20:,.1f} MiB/s"
                    + (f", {event['seconds_left']:.0f} s left" if event.get("seconds_left") is not None else ""))
            click.echo("\r" + line if terminal else line, err=True, nl=not terminal)
            return
        if terminal and step == "copy" and event.get("phase") == "done":
            click.echo(err=True)
        click.echo(f"{step}: {event.get('phase')}", err=True)

    return report


@home_group.command("move")
@click.option("--to", "to", required=True, metavar="URL", help="The new home: a local or POSIX path, or s3://BUCKET/PREFIX.")
@click.option("--confirm", is_flag=True, help="Move (default: print the plan and change nothing).")
@click.option("--stop", is_flag=True, help="Stop running jobs first (each after its batch in flight).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan, then each step's events, as JSON.")
@click.pass_obj
def home_move(obj: Environment, to: str, confirm: bool, stop: bool, as_json: bool) -> None:
    layout = obj.layout
    done = moved(layout.home)  # this command alone is served a moved home: to finish a move to the same place
    if done is not None and done.to.rstrip("/") != to.rstrip("/"):
        raise HomeMovedError(done, "STATEOPS_HOME")
    catalog, settings = obj.catalog, obj.settings.control
    running = [name for name in catalog.jobs
               if (lease := current_lease(layout, name)) is not None and lease.stale_reason(settings) is None]
    home = layout.home.rstrip("/") + "/"
    outside = [name for name, spec in catalog.jobs.items()
               if not (spec.checkpoint_path(layout) + "/").startswith(home)
               or not (spec.archive_path(layout) + "/").startswith(home)]
    plan = make_plan(layout, to, running, outside, stop=stop)
    if as_json:
        click.echo(json.dumps({"step": "plan", **plan.to_json()}, default=str))
    else:
        click.echo(plan.render())
    if not confirm:
        if not as_json:
            click.echo(f"A plan: nothing was changed. To move: stateops home move --to {plan.new} --confirm"
                       + (" --stop" if plan.running else ""))
        return
    if plan.refusals:
        raise MoveRefused(f"{plan.refusals[0]}" + (f" (and {len(plan.refusals) - 1} more)" if len(plan.refusals) > 1
                                                  else ""))

    def audit(old, new):
        from stateops.jobs.runtime.relocation import audits_agree
        from stateops.jobs.runtime.session import console_log_for, get_session

        # Spark's console output into the move's folder (a local copy of it for a new home on object storage), so
        # the terminal shows the move's lines
        console_log = console_log_for(f"{Layout(plan.new).move_dir(plan.move_id)}/spark.log")
        return audits_agree(get_session(obj.spark, console_log=console_log), catalog, old, new)

    summary = Move(plan, sorted(catalog.jobs), settings=settings, actor=default_actor(), stop=stop,
                   report=_reporter(as_json), audit=audit).run()
    if as_json:
        click.echo(json.dumps({"step": "moved", **summary}, default=str))
        return
    click.echo(f"moved {summary['files']:,} files ({summary['bytes'] / 2**20:,.1f} MiB) from {plan.old} to {plan.new}. "
               f"Next: set STATEOPS_HOME={plan.new} (the Dagster code location too: its STATEOPS_HOME, or "
               f"build_defs(home=\"{plan.new}\")); {plan.old} now refuses every command and is the rollback until you "
               "delete it")
