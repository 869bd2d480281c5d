"""`stateops inventory [--json]`, `stateops retention plan [--json]`, `stateops retention apply --yes`.

`plan` only reads. `apply` plans afresh (or takes a saved plan: `--plan FILE`, the JSON of `plan --json`, a
request whose items are admitted only as a fresh plan has them) and applies it under the per-root retention
lock, re-checking every item just before it acts. Exit codes: 0 done; 2 usage or configuration errors,
`apply` without --yes, a second run on a held root, or some item refused (outside the roots, not what the
plan command plans now, a held lease: one line each, the others applied); 1 some item failed or was only
partly done (the lines say why).
"""
from __future__ import annotations

import json

import click

from stateops import retention
from stateops.sizes import human_bytes
from stateops.control import default_actor
from stateops.errors import StateOpsError
from stateops.retention import history
from stateops.retention.model import Plan

from stateops.jobs.definition.environment import Environment
from stateops.jobs.runtime.retention import retention_scope


def _inventory_lines(data: dict) -> list[str]:
    totals = data["totals"]
    lines = [f"{data['home']}: {human_bytes(totals['bytes'])} in {totals['files']:,} files (checkpoints "
             f"{human_bytes(totals['checkpoints_bytes'])}, archives {human_bytes(totals['archives_bytes'])}, tables "
             f"{human_bytes(totals['tables_bytes'])}, ops tables {human_bytes(totals['ops_tables_bytes'])})"]
    for c in data["checkpoints"]:
        batches = (f"batches {c['oldest_restorable_batch']}..{c['latest_committed_batch']} restorable"
                   if c["oldest_restorable_batch"] is not None else
                   f"latest batch {c['latest_committed_batch']}, none restorable" if c["is_checkpoint"] else
                   "not a checkpoint")
        ops = ", ".join(o["operator_name"] or f"op {o['operator_id']}" for o in c["operators"]) or "stateless"
        lines.append(f"  checkpoint {c['path']} [{c['job'] or 'orphan'}, {c['kind']}]: {human_bytes(c['bytes'])}, "
                     f"{c['files']:,} files, {c['provider'] or '-'} ({ops}), {batches}, last modified "
                     f"{c['last_modified']}, {len(c['archives'])} archive(s)")
    for a in data["archives"]:
        lines.append(f"  archive {a['path']} [{a['job'] or 'orphan'}]: {human_bytes(a['bytes'])}, {a['files']:,} files,"
                     f" created {a['created_at']}, batch {a['latest_committed_batch']}"
                     f"{'' if a['finished'] else ', runbook not finished'}")
    for t in data["tables"]:
        lines.append(f"  table {t['path']} [{t['kind']}]: version {t['version']}, {t['files']:,} files "
                     f"({t['small_files']:,} small), {human_bytes(t['bytes'])} on disk, log {t['log_files']:,} files "
                     f"{human_bytes(t['log_bytes'])}")
    return lines


@click.command("inventory")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def inventory_command(obj: Environment, as_json: bool) -> None:
    """Everything under the roots: checkpoints, archives, Delta tables, with sizes and restorable batches."""
    data = retention.take_inventory(retention_scope(obj)).to_dict()
    click.echo(json.dumps(data, indent=2) if as_json else "\n".join(_inventory_lines(data)))


@click.group("retention")
def retention_group() -> None:
    """Plan and apply retention: bounded storage that never breaks a restart."""


@retention_group.command("plan")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (what `apply --plan` takes).")
@click.pass_obj
def plan_command(obj: Environment, as_json: bool) -> None:
    """List every item retention would act on, with its bytes, files and rule (changes nothing)."""
    plan = retention.make_plan(retention_scope(obj))
    click.echo(json.dumps(plan.to_dict(), indent=1) if as_json else plan.render())


@retention_group.command("apply")
@click.option("--yes", is_flag=True, help="Confirm: delete and rewrite what the plan lists.")
@click.option("--plan", "plan_file", type=click.Path(dir_okay=False), default=None,
              help="Apply this saved plan (JSON of `retention plan --json`) instead of planning now.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--actor", default=None, help="Who (default: user@host).")
@click.pass_obj
def apply_command(obj: Environment, yes: bool, plan_file: str | None, as_json: bool, actor: str | None) -> None:
    """Apply a retention plan: every item re-checked just before it acts, journaled in `actions`."""
    if not yes:
        raise StateOpsError("retention apply deletes files and needs --yes. Fix: review `stateops retention plan`, "
                            "then run `stateops retention apply --yes`")
    scope = retention_scope(obj)
    if plan_file:
        try:
            with open(plan_file) as handle:
                plan = Plan.from_dict(json.load(handle))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise StateOpsError(f"--plan {plan_file}: not a retention plan ({type(err).__name__}: {err}). Fix: "
                                "save one with `stateops retention plan --json > FILE`") from None
        inventory = None
    else:
        inventory = retention.take_inventory(scope)
        plan = retention.make_plan(scope, inventory)
    report = retention.apply(scope, plan, actor=actor or default_actor(), fresh=inventory is not None)
    history.record(scope.layout, inventory, plan, report)
    click.echo(json.dumps(report.to_dict(), indent=1) if as_json else report.render())
    if not report.ok:
        raise click.exceptions.Exit(2 if report.refused else 1)


COMMANDS = (inventory_command, retention_group)
