"""`stateops jobs list|describe|check|run|profile`, and the control plane (stateops.control) from a shell:
`stateops jobs status|stop|override|lock|unlock`.

Exit codes as everywhere: 0 done (also "not running, nothing to stop"), 1 a query failed or the stop was not
confirmed within --wait, 2 usage, configuration or a refusal (one line).
"""
from __future__ import annotations

import json
import uuid
from dataclasses import asdict

import click

from stateops import control, progress
from stateops.control.fence.writes import not_create_once
from stateops.control import (current_lease, default_actor, job_status, maintenance, overrides, request_stop,
                              wait_released)
from stateops.errors import ConfigError
from stateops.profile.report import profiles, render as render_profiles
from stateops.redaction import redact_tree
from stateops.layout import Layout

from stateops.jobs.definition.catalog import Catalog
from stateops.jobs.definition.environment import Environment
from stateops.jobs.definition.settings import CLI_NAMES, settings_report, state_store_report, watermark_bounds
from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.runtime.result import MODES, RunResult
from stateops.jobs.runtime.session import delta_writer_in_force, join_state_format_in_force


@click.group("jobs")
def jobs_group() -> None:
    """List, describe and run the streaming jobs."""


@jobs_group.command("list")
@click.pass_obj
def jobs_list(obj: Environment) -> None:
    for spec in obj.catalog.jobs.values():
        click.echo(f"{spec.name:16} {spec.output_mode:7} {spec.description}")


def describe(spec: JobSpec, catalog: Catalog, spark: SparkSettings) -> dict:
    """Everything an operator needs to find a job's data, and its effective settings, as plain data. A Kafka job's
    options as written: `${env:NAME}` references shown, values under secret-looking keys masked."""
    layout = catalog.layout
    settings = settings_report(spec, catalog)
    writer, why = delta_writer_in_force(spark)
    return {
        "name": spec.name,
        "description": spec.description,
        "source": spec.source,
        "inputs": [{"name": i.name, "landing": i.landing(layout), "schema": i.schema,
                    "time_column": i.time_column} for i in spec.inputs],
        "transformation": spec.transformation,
        "output_mode": spec.output_mode,
        "merge_keys": list(spec.merge_keys),
        "checkpoint": spec.checkpoint_path(layout),
        "output_table": spec.sink_path(layout),
        "delta_writer": {"value": writer, "source": why},
        "jars": spark.jars.describe(),
        **({"kafka": {"bootstrap_servers": spec.kafka_bootstrap_servers, "topics": [i.topic for i in spec.inputs],
                      "options": redact_tree(dict(spec.kafka_options))}} if spec.source == "kafka" else {}),
        **({"join_state_format": join_state_format_in_force(spark, spec.checkpoint_path(layout))}
           if spec.join is not None else {}),
        "state_store": state_store_report(spec, layout, spark.extra_conf),
        "commit_points": {"create_once": not (weaker := not_create_once(
            [spec.checkpoint_path(layout), spec.sink_path(layout), layout.deadletter_table(spec.name)])),
            "note": weaker},
        "deadletter": {"table": layout.deadletter_table(spec.name),
                       "collected_by": f"the query {spec.name}, in the scan that reads its input (one read of each "
                                       "line), written with each batch's output"},
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
        "migration_debt": _migration_debt(spec, layout),
    }


def _migration_debt(spec: JobSpec, layout) -> dict | None:
    """The job's last partial migration against its checkpoint's watermark (stateops.migration.debt), or None."""
    from stateops.checkpoints.checkpoint import Checkpoint, NotACheckpointError
    from stateops.migration import debt

    try:
        return debt.current(layout, spec.name, Checkpoint.open(spec.checkpoint_path(layout)))
    except NotACheckpointError:
        return None


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


@jobs_group.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def jobs_describe(obj: Environment, name: str, as_json: bool) -> None:
    info = describe(obj.catalog.job(name), obj.catalog, obj.spark)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    settings = info.pop("settings")
    store = info.pop("state_store")
    for key, value in info.items():
        click.echo(f"{key:18} {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    click.echo("state store:")
    for name, entry in store.items():
        if name != "notes":
            click.echo(f"  {name:22} {entry['value']} ({entry['source']})")
    for note in store["notes"]:
        click.echo(f"  note: {note}")
    click.echo("effective settings:")
    for name, entry in settings.items():
        click.echo(f"  {_setting_line(name, entry)}")


@jobs_group.command("check")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def jobs_check(obj: Environment, name: str, as_json: bool) -> None:
    """Whether NAME's query still fits the state in its checkpoint (Spark's own rules, and key columns by name),
    without running it: exit 0 it fits (or there is no state yet), 2 it does not (the line names the operator,
    old -> new, and the rebuild), 1 the check could not decide."""
    from stateops.jobs.runtime.compatibility import REFUSED, UNDECIDED, check_job
    from stateops.jobs.runtime.session import console_log_for, get_session

    spec = obj.catalog.job(name)
    fit = check_job(get_session(obj.spark, console_log=console_log_for(obj.layout.run_log(spec.name, "state-check"))),
                    spec, obj.layout)
    if as_json:
        click.echo(json.dumps(fit.to_json(), indent=2))
    else:
        click.echo(fit.line, err=fit.status == REFUSED)
    if fit.status in (REFUSED, UNDECIDED):
        click.get_current_context().exit(2 if fit.status == REFUSED else 1)


@jobs_group.command("adopt")
@click.argument("name")
@click.option("--confirm", is_flag=True, help="Adopt (without it: the plan only, nothing changed).")
@click.option("--replay-last-batch", is_flag=True,
              help="A batch in flight whose output cannot be known is written again (MERGE sinks only).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--actor", default=None, help="Who adopts (default: user@host).")
@click.pass_obj
def jobs_adopt(obj: Environment, name: str, confirm: bool, replay_last_batch: bool, as_json: bool,
               actor: str | None) -> None:
    """Bring NAME's existing checkpoint, table and input under StateOps without reprocessing (docs/operations.md,
    Bringing an existing job). Without --confirm: the plan (exit 0 ready or adopted, 2 refused). With it: adopted
    (exit 0) or refused in one line (exit 2), nothing changed."""
    from stateops.jobs.runtime.adoption import AdoptionRefused, adopt, make_plan
    from stateops.jobs.runtime.session import console_log_for, get_session

    spec = obj.catalog.job(name)
    spec.require_extras()
    spark = get_session(obj.spark, console_log=console_log_for(obj.layout.run_log(spec.name, "adopt")))
    if confirm:
        try:
            plan = adopt(spark, spec, obj.layout, obj.settings, actor=actor or default_actor(),
                         replay_last_batch=replay_last_batch)
        except AdoptionRefused as refused:
            if as_json:
                click.echo(json.dumps(refused.plan.to_json(), indent=2, default=str))
            raise
    else:
        plan = make_plan(spark, spec, obj.layout, obj.settings, replay_last_batch=replay_last_batch)
    if as_json:
        click.echo(json.dumps(plan.to_json(), indent=2, default=str))
    else:
        click.echo("\n".join(plan.text()))
    if plan.status == "refused":
        click.get_current_context().exit(2)


def summary(result: RunResult) -> str:
    """One line per run: batches, rows, dead letters, state rows, watermark, and what stopped it."""
    state = ", ".join(f"{op['operator_name']}=" + ("not counted" if op["num_rows_total"] is None else
                                                   str(op["num_rows_total"])) for op in result.state_operators)
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


@jobs_group.command("run")
@click.argument("name")
@click.option("--mode", type=click.Choice(MODES), default="bounded", show_default=True,
              help="bounded: process what has landed, then stop; continuous: run until stopped.")
@click.option("--max-seconds", type=float, default=None, help="Continuous mode: stop after this long.")
@click.option("--json", "as_json", is_flag=True, help="Print the run result as JSON.")
@click.option("--runbook-id", default=None, help="Start while this runbook holds the job's maintenance lock.")
@click.pass_obj
def jobs_run(obj: Environment, name: str, mode: str, max_seconds: float | None, as_json: bool,
             runbook_id: str | None) -> None:
    """Run NAME once; refused (exit 2) while another run holds its lease or a runbook its maintenance lock."""
    from stateops.jobs.runtime.runner import run_job
    from stateops.jobs.runtime.session import console_log_for, get_session

    spec, layout, run_id = obj.catalog.job(name), obj.layout, uuid.uuid4().hex
    spec.require_extras()  # refused before a JVM starts, as is a run already going; run_job decides atomically
    control.check_can_start(layout, name, settings=obj.settings.control, runbook_id=runbook_id)
    # Spark's console output goes to the run's log (a local copy for a home on object storage), so the terminal
    # shows only our lines.
    console_log = console_log_for(layout.run_log(spec.name, run_id))
    session = lambda: get_session(obj.spark, console_log=console_log)  # noqa: E731 - started once the lease is held
    result = run_job(session, spec, layout, settings=obj.settings, mode=mode, max_seconds=max_seconds, run_id=run_id,
                     runbook_id=runbook_id)
    click.echo(json.dumps(asdict(result), default=str) if as_json else summary(result))


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
    if status.get("restart"):
        lines.append(f"  restart: {status['restart']['summary']}")
    if "kafka_lag" in status:
        lag = status["kafka_lag"]
        lines.append("  kafka lag: " + (f"{lag['total']:,} records behind the latest offsets after batch "
                                        f"{lag['batch_id']} (" + ", ".join(f"{p} {n:,}" for p, n in
                                                                           sorted(lag["partitions"].items())) + ")"
                                        if lag else "no batch recorded yet"))
    return "\n".join(lines)


@click.command("status")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (an object for NAME, else a list).")
@click.pass_obj
def status_command(obj: Environment, name: str | None, as_json: bool) -> None:
    """Lease (holder, heartbeat, live or stale), latest batch and watermark, pending stop, lock, overrides; for
    NAME also what its next start loads (snapshots, changelogs to replay) and how long that should take."""
    layout: Layout = obj.layout
    specs = [obj.catalog.job(name)] if name else list(obj.catalog.jobs.values())
    # The first job's status refuses a control home the control plane cannot use, before any table is read;
    # the others share one read of the overrides table (once per job, each read scanned the whole table).
    settings = obj.settings.control
    states = [job_status(layout, specs[0].name, specs[0].checkpoint_path(layout), settings)]
    forced = overrides.in_force_by_job(layout) if len(specs) > 1 else {}
    states += [job_status(layout, spec.name, spec.checkpoint_path(layout), settings, forced=forced.get(spec.name, {}))
               for spec in specs[1:]]
    if name:  # what its next start loads: a listing of its checkpoint, too much for every job of a fleet at once
        cost = progress.next_start(specs[0].checkpoint_path(layout), layout, specs[0].name)
        states[0]["restart"] = cost.to_dict() if cost else None
    if any(spec.source == "kafka" for spec in specs):
        lags = progress.kafka_lags(layout)
        for spec, state in zip(specs, states):
            if spec.source == "kafka":  # records behind the latest offsets, per topic/partition
                state["kafka_lag"] = lags.get(spec.name)
    if as_json:
        click.echo(json.dumps(states[0] if name else states, indent=2))
    else:
        click.echo("\n".join(render_status(state) for state in states))


@click.command("profile")
@click.argument("name")
@click.option("--batches", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many of the newest batches that ran.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of batches, oldest first.")
@click.pass_obj
def profile_command(obj: Environment, name: str, batches: int, as_json: bool) -> None:
    """Where NAME's batches' time went: each batch's duration in parts (planning, offsets, read and parse, each
    stateful operator's updates and eviction, the state commit, the sink write, the dead letters, the logs, the
    rest), and per operator its store's commit, update and removal times and metrics (docs/jobs.md)."""
    obj.catalog.job(name)
    found = profiles(obj.layout, name, batches)
    click.echo(json.dumps(found, indent=2) if as_json else render_profiles(name, found))


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
    settings = ctx.obj.settings.control
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
def override_command(obj: Environment, name: str, watermark_delay: str | None, shuffle_partitions: str | None,
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
def lock_command(obj: Environment, name: str, reason: str, runbook_id: str | None, actor: str | None) -> None:
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
def unlock_command(obj: Environment, name: str, runbook_id: str, actor: str | None) -> None:
    """Release NAME's maintenance lock."""
    obj.catalog.job(name)
    released = maintenance.release(obj.layout, name, runbook_id=runbook_id, actor=actor or default_actor())
    click.echo(f"{name} unlocked (was held since {released.since})" if released else
               f"{name} was not locked; nothing to release")


for _command in (status_command, profile_command, stop_command, override_command, lock_command, unlock_command):
    jobs_group.add_command(_command)
