"""`stateops jobs status|stop|override|lock|unlock`: the control plane (stateops.control) from a shell.

Exit codes as everywhere: 0 done (also "not running, nothing to stop"), 1 the stop was not confirmed
within --wait, 2 usage or configuration errors (one line).
"""
from __future__ import annotations

import json
import uuid

import click

from stateops.control import (current_lease, default_actor, job_status, maintenance, overrides, request_stop,
                              wait_released)
from stateops.control.settings import ControlSettings
from stateops.errors import ConfigError
from stateops.layout import Layout

from jobs.cli_context import CliContext
from jobs.settings import CLI_NAMES, watermark_bounds


def _lease_line(lease: dict | None) -> str:
    if lease is None:
        return "no lease"
    dagster = f" (Dagster run {lease['dagster_run_id']})" if lease["dagster_run_id"] else ""
    runbook = f" for runbook {lease['runbook_id']}" if lease["runbook_id"] else ""
    health = f"STALE: {lease['stale_reason']}" if lease["stale"] else "live"
    return (f"run {lease['run_id']}{dagster}{runbook}, pid {lease['pid']} on {lease['host']}, since "
            f"{lease['started']}, heartbeat {lease['heartbeat_age_seconds']:.0f} s ago ({health})")


def render_status(status: dict) -> str:
    cp = status["checkpoint"]
    stop, lock = status["stop_request"], status["maintenance_lock"]
    lines = [
        f"{status['job']}: {status['state']} - {_lease_line(status['lease'])}",
        "  checkpoint: " + (f"batch {cp['latest_committed_batch']}, watermark {cp['watermark'] or 'none'}"
                             if cp["latest_committed_batch"] is not None else f"no committed batch ({cp['path']})"),
        "  stop request: " + (f"by {stop['actor']} at {stop['requested_at']} (grace {stop['grace_seconds']:g} s)"
                              f"{': ' + stop['reason'] if stop['reason'] else ''}" if stop else "none"),
        "  maintenance lock: " + (f"runbook {lock['runbook_id']} ({lock['actor']}, since {lock['since']}): "
                                  f"{lock['reason']}" if lock else "none"),
        "  overrides: " + ("; ".join(f"{name} = {o['value']} ({o['actor']}, {o['changed_at']}: {o['reason']})"
                                     for name, o in status["overrides"].items()) or "none"),
    ]
    return "\n".join(lines)


@click.command("status")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (an object for NAME, else a list).")
@click.pass_obj
def status_command(obj: CliContext, name: str | None, as_json: bool) -> None:
    """Lease (holder, heartbeat, live or stale), latest batch and watermark, pending stop, lock, overrides."""
    layout: Layout = obj.layout
    specs = [obj.catalog.job(name)] if name else list(obj.catalog.jobs.values())
    states = [job_status(layout, spec.name, spec.checkpoint_path(layout)) for spec in specs]
    if as_json:
        click.echo(json.dumps(states[0] if name else states, indent=2))
    else:
        click.echo("\n".join(render_status(state) for state in states))


@click.command("stop")
@click.argument("name")
@click.option("--wait", "wait_seconds", type=click.FloatRange(min=0), default=None,
              help="Wait up to S seconds until the run released its lease; exit 1 if it has not.")
@click.option("--grace", type=click.FloatRange(min=0), default=None,
              help="Seconds the run may wait for its batch in flight before stopping hard "
                   "(default: STATEOPS_STOP_GRACE_SECONDS, 60).")
@click.option("--reason", default="", help="Why (journaled in the actions table).")
@click.option("--actor", default=None, help="Who asks (default: user@host).")
@click.pass_context
def stop_command(ctx: click.Context, name: str, wait_seconds: float | None, grace: float | None, reason: str,
                 actor: str | None) -> None:
    """Ask the run holding NAME's lease to stop after its batch in flight."""
    layout: Layout = ctx.obj.layout
    ctx.obj.catalog.job(name)
    settings = ControlSettings.from_env()
    request = request_stop(layout, name, actor=actor or default_actor(), reason=reason, grace_seconds=grace,
                           settings=settings)
    if request is None:
        holder = current_lease(layout, name)
        why = f" (stale lease of run {holder.run_id}: {holder.stale_reason(settings)})" if holder else ""
        click.echo(f"{name} is not running{why}; nothing to stop")
        return
    click.echo(f"stop requested: {name} run {request.run_id} stops after its batch in flight "
               f"(hard stop after {request.grace_seconds:g} s)")
    if wait_seconds is None:
        return
    if wait_released(layout, name, request.lease_id, wait_seconds, settings=settings):
        holder = current_lease(layout, name)
        died = holder is not None and holder.lease_id == request.lease_id
        click.echo(f"{name} stopped: run {request.run_id} " + (
            f"died ({holder.stale_reason(settings)}); the next run takes its stale lease over" if died
            else "no longer holds the lease"))
        return
    click.echo(f"Error: {name} is still running after {wait_seconds:g} s: run {request.run_id} has not released "
               f"its lease (the stop request stays pending; see stateops jobs status {name})", err=True)
    ctx.exit(1)


@click.command("override")
@click.argument("name")
@click.option("--watermark", "watermark_delay", default=None,
              help='Watermark delay, e.g. "20 minutes"; must lie within the job\'s watermark_min/max.')
@click.option("--shuffle-partitions", type=str, default=None,
              help="Shuffle partitions; used only when the job starts on a new checkpoint (a rebuild).")
@click.option("--clear", "clear", multiple=True, type=click.Choice(sorted(CLI_NAMES.values())),
              help="Clear an override (back to the config file or spec default). Repeatable.")
@click.option("--reason", default=None, help="Why (required for a change; kept in the history).")
@click.option("--actor", default=None, help="Who (default: user@host).")
@click.option("--runbook-id", default=None, help="The runbook making the change, if any.")
@click.option("--json", "as_json", is_flag=True, help="Print the history as JSON (without changes).")
@click.pass_obj
def override_command(obj: CliContext, name: str, watermark_delay: str | None, shuffle_partitions: str | None,
                     clear: tuple[str, ...], reason: str | None, actor: str | None, runbook_id: str | None,
                     as_json: bool) -> None:
    """Set or clear NAME's overrides (applied at its next start); without changes, print their history."""
    layout: Layout = obj.layout
    spec = obj.catalog.job(name)
    wanted = {setting: value for setting, value in ((overrides.WATERMARK_DELAY, watermark_delay),
                                                     (overrides.SHUFFLE_PARTITIONS, shuffle_partitions))
              if value is not None}
    cleared = [setting for setting, flag in CLI_NAMES.items() if flag in clear]
    if set(wanted) & set(cleared):
        raise ConfigError("--clear", "sets and clears the same setting", "do one or the other")
    if not wanted and not cleared:
        changes = overrides.history(layout, name)
        if as_json:
            click.echo(json.dumps([{"setting": c.setting, **c.contract()} for c in changes], indent=2))
        for c in [] if as_json else changes:
            click.echo(f"{c.changed_at.isoformat(timespec='seconds')} {c.setting}: {c.previous} -> {c.value} "
                       f"by {c.actor}{' (runbook ' + c.runbook_id + ')' if c.runbook_id else ''}: {c.reason}")
        if not changes and not as_json:
            click.echo(f"{name}: no override was ever set")
        return
    bounds = watermark_bounds(spec)
    for setting, value in wanted.items():  # validate every value before writing any
        overrides.validate(name, setting, value, bounds)
    who = actor or default_actor()
    for setting, value in wanted.items():
        change = overrides.set_override(layout, name, setting, value, bounds=bounds, reason=reason, actor=who,
                                        runbook_id=runbook_id)
        click.echo(f"{name}: {setting} = {change.value} (was {change.previous or 'not overridden'}); "
                   "applies at the next start")
    for setting in cleared:
        change = overrides.clear_override(layout, name, setting, reason=reason, actor=who, runbook_id=runbook_id)
        click.echo(f"{name}: {setting} override cleared (was {change.previous})" if change else
                   f"{name}: no {setting} override in force; nothing cleared")


@click.command("lock")
@click.argument("name")
@click.option("--reason", required=True, help="Why the job is under maintenance.")
@click.option("--runbook-id", default=None, help="Hold the lock under this id (default: a new one, printed).")
@click.option("--actor", default=None, help="Who (default: user@host).")
@click.pass_obj
def lock_command(obj: CliContext, name: str, reason: str, runbook_id: str | None, actor: str | None) -> None:
    """Take NAME's maintenance lock: no run starts unless it presents the runbook id."""
    obj.catalog.job(name)
    lock = maintenance.acquire(obj.layout, name, runbook_id=runbook_id or f"manual-{uuid.uuid4().hex[:12]}",
                               actor=actor or default_actor(), reason=reason)
    click.echo(f"{name} locked for maintenance by runbook {lock.runbook_id}: runs start only with "
               f"--runbook-id {lock.runbook_id}; release with: stateops jobs unlock {name} --runbook-id "
               f"{lock.runbook_id}")


@click.command("unlock")
@click.argument("name")
@click.option("--runbook-id", required=True, help="The runbook id holding the lock (see stateops jobs status).")
@click.option("--actor", default=None, help="Who (default: user@host).")
@click.pass_obj
def unlock_command(obj: CliContext, name: str, runbook_id: str, actor: str | None) -> None:
    """Release NAME's maintenance lock."""
    obj.catalog.job(name)
    released = maintenance.release(obj.layout, name, runbook_id=runbook_id, actor=actor or default_actor())
    click.echo(f"{name} unlocked (was held since {released.since})" if released else
               f"{name} was not locked; nothing to release")


COMMANDS = (status_command, stop_command, override_command, lock_command, unlock_command)
