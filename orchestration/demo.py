"""The demo, through Dagster: generate input, then materialize every job's asset and its audits on the
Dagster instance the UI serves (stateops.dagster.instance), so `bash scripts/ui` shows runs, metadata, audit
tables, charts and asset checks from the first command.

    python -m stateops.dagster.demo      (bash scripts/demo; STATEOPS_HOME, STATEOPS_CONFIG as for the CLI)

One run of the implicit asset job, as the UI's Materialize launches it: every job asset, then its deep and
fast audits, then the checks on the job's asset (in-process: one JVM for the whole run).
"""
from __future__ import annotations

import sys
from typing import Callable

from dagster import AssetKey, DagsterInstance, Definitions, ExecuteInProcessResult, in_process_executor

from stateops.jobs.demo.generator import DEMO_INPUT, GeneratorConfig, generate
from stateops.layout import Layout

from stateops.jobs.definition.spec import JobSpec
from stateops.dagster.audits.assets import deep_audit_key, fast_audit_key
from stateops.dagster.catalog import load_specs
from stateops.dagster.factory import build_defs
from stateops.dagster.instance import dagster_home, prepare


def demo_selection(specs: dict[str, JobSpec]) -> list[AssetKey]:
    """Every job asset, and its deep and fast audit assets."""
    return [key for spec in specs.values()
            for key in (AssetKey(spec.output_asset), deep_audit_key(spec), fast_audit_key(spec))]


def run_demo(layout: Layout, instance: DagsterInstance, config: GeneratorConfig = DEMO_INPUT,
             echo: Callable[[str], None] = print) -> ExecuteInProcessResult:
    """Generate `config`'s input under `layout`, then materialize the demo's selection on `instance`."""
    generated = generate(layout, config)
    echo(f"StateOps demo under {layout.home}: " + ", ".join(f"{n} {source}" for source, n in generated.lines.items()))
    defs = Definitions.merge(build_defs(home=layout.home), Definitions(executor=in_process_executor))
    selection = demo_selection(load_specs(home=layout.home))  # the catalog build_defs validated, reused (unchanged)
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=selection, raise_on_error=False, tags={"stateops/demo": "true"},
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})  # the UI has every event
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        meta = {k: v.value for k, v in materialization.metadata.items()}
        if "audit_kind" in meta:
            echo(f"  {materialization.asset_key.to_user_string()}: {meta['audit_kind']} audit, batch "
                 f"{meta['batch_id']}, {meta['state_rows_total']} state rows, findings {meta['finding_codes']}")
        else:
            echo(f"  {materialization.asset_key.to_user_string()}: {meta['batches']} batches, {meta['input_rows']} "
                 f"input rows, {meta.get('dagster/row_count')} rows in {meta['dagster/uri']}")
    for check in result.get_asset_check_evaluations():
        echo(f"  check {check.asset_key.to_user_string()}.{check.check_name}: "
             f"{'passed' if check.passed else 'failed (' + check.severity.value + ')'}")
    echo(f"Dagster run {result.run_id}: {'success' if result.success else 'FAILED'}")
    return result


def main() -> int:
    layout = Layout.from_env()
    home = dagster_home(layout)
    note = prepare(home)
    if note:
        print(note, file=sys.stderr)
    with DagsterInstance.from_config(home) as instance:
        result = run_demo(layout, instance)
    print(f"Dagster instance: {home}")
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
