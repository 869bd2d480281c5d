"""Asset jobs resolved against their own assets, so that a code location's load grows linearly with its jobs.

Every StateOps job has three asset jobs (`<job>_job`, `<job>_deep_audit`, `<job>_fast_audit`), each selecting
a few assets of that one job. Dagster resolves an asset job when the code server builds its snapshot, by
walking every assets definition of the code location (`_subset_assets_defs` in dagster's asset_job.py): at
1,000 jobs, 3,000 jobs times some 4,000 definitions was 121 s of a 150 s profile, and the snapshot took a
minute. A `ScopedAssetJob` resolves the same selection against the assets it can touch (what it selects,
the checks it selects or that target what it selects, and their direct upstream assets), which is what
Dagster's resolution keeps of the whole graph anyway: the resolved job is the same
(tests/unit/test_asset_jobs.py compares the job snapshots both ways).

Only for a selection that names its assets (AssetSelection.assets) and checks on them or on their direct
upstream assets (AssetSelection.checks, `without_checks`, unions of those): a selection that walks the graph
(upstream, downstream, groups, all checks) needs the whole graph.
"""
from __future__ import annotations

from typing import Mapping

from dagster import AssetSelection, ExecutorDefinition, JobDefinition, ResourceDefinition, in_process_executor
from dagster._core.definitions.assets.graph.asset_graph import AssetGraph
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


class ScopedAssetJob(UnresolvedAssetJobDefinition):
    """define_asset_job's definition, resolved against the part of the asset graph its selection touches."""

    def resolve(self, asset_graph: AssetGraph, default_executor_def: ExecutorDefinition | None = None,
                resource_defs: Mapping[str, ResourceDefinition] | None = None) -> JobDefinition:
        return super().resolve(scope(asset_graph, self.selection), default_executor_def, resource_defs)


def scope(asset_graph: AssetGraph, selection: AssetSelection) -> AssetGraph:
    """The assets definitions of the assets `selection` selects and of their direct upstream assets, of every
    check on those, and of their inputs (Dagster keeps those as unexecutable assets). The checks themselves are
    resolved in this small graph: resolved in the whole one, a selection of checks walks every check key of the
    code location (a third of the load at 1,000 jobs)."""
    keys = selection.resolve(asset_graph)
    near = {*keys, *(parent for key in keys for parent in asset_graph.get(key).parent_keys)}
    touched = set(asset_graph.assets_defs_for_keys([*near, *(c for key in near for c in asset_graph.get(key).check_keys)]))
    inputs = {key for assets_def in touched for key in assets_def.node_keys_by_input_name.values()}
    touched.update(asset_graph.assets_defs_for_keys(key for key in inputs if asset_graph.has(key)))
    return AssetGraph.from_assets(list(touched))


def scoped_asset_job(name: str, selection: AssetSelection, description: str) -> ScopedAssetJob:
    """An asset job (as define_asset_job makes it) for a selection of named assets and checks, run in one process
    (at most one JVM per run, whatever the code location's default executor)."""
    return ScopedAssetJob(name=name, selection=selection, description=description, executor_def=in_process_executor)
