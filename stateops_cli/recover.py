"""`stateops recover plan|run` and `stateops archives list|show`: the guarded runbook from a shell.

    stateops recover plan JOB --mode MODE [--watermark "5 minutes"] [--partitions N] [--to-batch N]
                              [--archive ID] [--to rocksdb|memory] [--json]
    stateops recover run JOB ... --confirm JOB [--reason R]     (without --confirm: a dry run, the plan)
    stateops archives list JOB [--json]
    stateops archives show ID [--json] [--verify]

Exit codes: 0 done (or planned), 1 the runbook failed and rolled back (or an archive does not verify),
2 refused or a usage error (one line; nothing was changed).
"""
from __future__ import annotations

import json
import posixpath

import click

from stateops.recovery import MODES, RecoveryRequest, RequestRefused
from stateops.checkpoints import archive
from stateops.runbooks import StepEvent, read_entries
from stateops.recovery.model import MigrationRefused, RecoveryPlan, RecoveryRefused
from stateops.recovery.request import cli_words, described, request_fields

from stateops.jobs.definition.catalog import Catalog
from stateops.jobs.definition.environment import Environment
from stateops.jobs.runtime.recovery import plan as plan_recovery
from stateops.jobs.runtime.recovery import recover


def _parameter(name: str, info):
    """One request field as a click argument or option: named by its flag, typed from the model (int; `mode` a
    choice of MODES), its description in the CLI's words as the help. `--dry-run` is a flag here: without
    --confirm a run is a dry run anyway, with it the flag keeps it one."""
    if name == "job":
        return click.argument("job")
    if name == "dry_run":
        return click.option("--dry-run", "dry_run", is_flag=True, help="Only print the plan, even with --confirm.")
    kwargs = {"default": info.default, "help": described(name, cli_words())}
    if name == "mode":
        kwargs.update(required=True, type=click.Choice(MODES))
    elif int in getattr(info.annotation, "__args__", ()):
        kwargs["type"] = int
    return click.option(info.json_schema_extra["flag"], name, **kwargs)


def _request_options(*, acting: bool):
    """The request's fields as the CLI's options (`acting`: `run`'s --confirm and --dry-run too), and --json."""
    only_run = ("confirm", "dry_run")

    def decorate(command):
        parameters = [_parameter(name, info) for name, info in request_fields().items()
                      if acting or name not in only_run]
        parameters.append(click.option("--json", "as_json", is_flag=True, help="Print JSON."))
        for parameter in reversed(parameters):
            command = parameter(command)
        return command
    return decorate


def _in_cli_words(call):
    """Run `call`; a refusal of the request is said with the CLI's flags."""
    try:
        return call()
    except RequestRefused as err:
        raise RecoveryRefused(err.words(cli_words())) from None


@click.group("recover")
def recover_group() -> None:
    """Guarded state recovery: plan, then run (stop, archive, adjust, restart, verify, roll back)."""


@recover_group.command("plan")
@_request_options(acting=False)
@click.pass_obj
def plan_command(obj: Environment, as_json: bool, **values) -> None:
    """Show what `recover run` would do (nothing changed; no JVM but for mode migrate, which plans the job's query
    against its state). A migration it would refuse: with --json, its changes as classified, then the refusal."""
    try:
        planned = _in_cli_words(lambda: plan_recovery(obj, RecoveryRequest(**values)))
    except MigrationRefused as err:
        if as_json:
            click.echo(json.dumps({"job": values["job"], "mode": "migrate", "refused": str(err),
                                   "migration": err.migration}, indent=2))
        raise
    click.echo(json.dumps(planned.to_dict(), indent=2) if as_json else planned.render())


def _echo_event(event: StepEvent) -> None:
    shown = {k: v for k, v in event.details.items() if k not in ("plan", "audit", "audit_after", "verification")}
    click.echo(f"  {event.at[11:19]} {event.step:20} {event.phase:8} " + (json.dumps(shown, default=str)[:200]
                                                                             if shown else ""))


@recover_group.command("run")
@_request_options(acting=True)
@click.pass_context
def run_command(ctx: click.Context, as_json: bool, dry_run: bool, **values) -> None:
    """Run the runbook for JOB (a dry run without --confirm JOB). Exit 1 when it rolled back."""
    obj = ctx.obj
    request = RecoveryRequest(**values, dry_run=dry_run or values["confirm"] is None)
    report = _in_cli_words(lambda: recover(obj, request,
                                           on_event=None if as_json or request.dry_run else _echo_event))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
    elif report.outcome == "planned":
        click.echo(RecoveryPlan.from_dict(report.plan).render())
        click.echo(f"Dry run: nothing was changed. To act: stateops recover run {request.job} ... --confirm "
                   f"{request.job}")
    else:
        click.echo(report.summary())
        verification = report.verification or {}
        for check in verification.get("checks", []):
            click.echo(f"  {'ok  ' if check['ok'] else 'FAIL'} {check['name']:12} {check['detail']}")
        for line in _state_rows(report.audit_before, report.audit_after):
            click.echo(line)
        if (report.rollback or {}).get("note"):
            click.echo(f"  rollback: {report.rollback['note']}")
        for note in report.notes:
            click.echo(f"  note: {note}")
        click.echo(f"  archive and journal: {report.archive_path}")
    if report.outcome in ("rolled_back", "failed"):
        ctx.exit(1)


def _state_rows(before: dict | None, after: dict | None) -> list[str]:
    """`state op/store: rows (partitions) before -> after` from the deep audits around the runbook."""
    def per_store(audit: dict | None) -> dict[str, str]:
        operators = (audit or {}).get("operators", [])
        return {f"{op['operator_id']}/{op['store_name']}": f"{op['rows_total']} rows ({op['num_partitions']} "
                "partitions)" for op in operators}

    old, new = per_store(before), per_store(after)
    return [f"  state {store:12} {old.get(store, '-')} -> {new.get(store, '-')}" for store in sorted({*old, *new})]


@click.group("archives")
def archives_group() -> None:
    """The runbooks' archives: verified checkpoint copies with manifests and journals."""


@archives_group.command("list")
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_command(obj: Environment, job: str, as_json: bool) -> None:
    """Archives of JOB, oldest first."""
    root = obj.catalog.job(job).archive_path(obj.layout)
    found = archive.list_archives(root)
    if as_json:
        click.echo(json.dumps(found, indent=2, default=str))
        return
    if not found:
        click.echo(f"{job}: no archives under {root}")
    for item in found:
        click.echo(f"{item['archive_id']}  {item['mode']:11} batch {item['latest_committed_batch']:>5}  "
                   f"{item['files']:>5} files {item['total_bytes']:>12} B  {item['outcome'] or 'unfinished':11} "
                   f"{item['actor']}: {item['reason']}")


def _archive_root(catalog: Catalog, runbook_id: str) -> str:
    return catalog.job(archive.job_of(runbook_id)).archive_path(catalog.layout)


@archives_group.command("show")
@click.argument("archive_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (manifest with its files, journal, report).")
@click.option("--verify", "check", is_flag=True, help="Read the archived checkpoint back against the manifest; "
                                                      "exit 1 when it does not match.")
@click.pass_context
def show_command(ctx: click.Context, archive_id: str, as_json: bool, check: bool) -> None:
    """One archive: manifest, journal, outcome (and, with --verify, whether it still verifies)."""
    root = _archive_root(ctx.obj.catalog, archive_id)
    directory = archive.runbook_dir(root, archive_id)
    manifest = archive.manifest(root, archive_id)
    entries = read_entries(directory)
    if manifest is None and not entries:
        raise RecoveryRefused(f"no archive {archive_id} under {root}. Fix: see stateops archives list "
                              f"{archive.job_of(archive_id)}")
    report = archive.read_json(posixpath.join(directory, archive.REPORT))
    problems = archive.verify(root, archive_id) if check else None
    if as_json:
        click.echo(json.dumps({"archive_id": archive_id, "path": directory, "manifest": manifest,
                               "journal": entries, "report": report, "verify_problems": problems}, indent=2,
                              default=str))
    else:
        summary = archive.summary(root, archive_id)
        for key, value in (summary or {"path": directory, "archive": "none (the runbook ended before archiving)"}
                           ).items():
            click.echo(f"{key:24} {json.dumps(value, default=str) if isinstance(value, (dict, list)) else value}")
        if report:
            click.echo(f"{'outcome':24} {report['outcome']}" + (f": {report['error']}" if report.get("error") else ""))
        click.echo("journal:")
        for entry in entries:
            click.echo(f"  {entry['at']} {entry['step']:20} {entry['phase']}")
        if problems is not None:
            click.echo("verify: " + ("ok, every file matches the manifest" if not problems else
                                     f"{len(problems)} problems: {'; '.join(problems[:3])}"))
    if problems:
        ctx.exit(1)


COMMANDS = (recover_group, archives_group)
