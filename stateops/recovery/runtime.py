"""What the executor needs from Spark and the orchestrator, as an interface the core does not implement.

The jobs layer implements it with a Spark session (stateops.jobs.runtime.recovery.SparkRuntime); an orchestrator may
replace `launch_continuous` (e.g. start a long-running Dagster run instead of a process). Every method is
called with the job's lease and maintenance lock arranged by the executor.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

from stateops.control.fence.lease import Lease
from stateops.migration.classify import Rewrite
from stateops.recovery.store_switch import StoreToWrite

# Called by the stop step when the running query has not released its lease within the timeout: end the
# holder by force (e.g. terminate its Dagster run) and return True, or return False to refuse the runbook.
Terminate = Callable[[Lease], bool]


class Runtime(Protocol):
    def audit(self, checkpoint: str, batch_id: int | None = None) -> dict[str, Any]:
        """Deep audit (Spark's state reader) of a committed batch: the `stateops audit --json` contract, whose
        operators' `num_partitions` are counted from the state files."""

    def repartition(self, checkpoint: str, partitions: int) -> None:
        """Repartition the stopped query's state offline (writes one new batch)."""

    def write_store(self, checkpoint: str, batch_id: int, store: StoreToWrite, provider_class: str, version: int,
                    state_root: str) -> list[int]:
        """Rewrite one store of the stopped query's batch `batch_id` under `state_root` as `provider_class` at
        `version` (the store switch: stateops.recovery.store_switch); the rows written per partition."""

    def rewrite_state(self, checkpoint: str, batch: int, rewrite: Rewrite, provider_class: str, version: int,
                      state_root: str, partitions: int, schema: tuple[str, str] | None) -> list[int]:
        """Write one operator's migrated state under `state_root` (stateops.migration.apply.StateWriter)."""

    def migration_files(self, state_root: str) -> dict[int, tuple[str, str]]:
        """Put the job's query's schema and operator metadata files under `state_root`, as Spark plans it
        (stateops.migration.apply.StateFiles)."""

    def adopt_migration(self) -> dict[str, Any]:
        """Check the migrated checkpoint against the job's query as its restart will (raises when it does not fit),
        and keep its meaning; the check's JSON."""

    def run_bounded(self, runbook_id: str) -> dict[str, Any]:
        """Run the job once to the end of its available input, presenting `runbook_id` to the maintenance lock;
        returns at least {"run_id"}; raises when the run fails."""

    def launch_continuous(self, runbook_id: str, previous: dict[str, Any] | None) -> dict[str, Any]:
        """Start the job long-running in its own process (or run), presenting `runbook_id`; return at once with
        what was started (e.g. {"pid", "log"}). `previous`: the lease of the run the runbook stopped."""
