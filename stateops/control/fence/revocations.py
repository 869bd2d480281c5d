"""io.stateops.fence.Revocations (the fence jar) from Python: a job's folders revoked in this JVM the moment its run
finds the lease lost, restored when a run of the job holds the lease again.

The jar's checkpoint file manager and Delta log store refuse every write under a revoked folder, so a task or a
stream thread already under way fails at its next write instead of issuing it. `spark` is a live SparkSession (its
Py4J gateway); nothing here imports Spark.
"""
from __future__ import annotations

from typing import Any, Iterable


def _revocations(spark: Any) -> Any:
    return spark._jvm.io.stateops.fence.Revocations


def revoke(spark: Any, folders: Iterable[str]) -> None:
    """No write of this JVM's under `folders` from now on (a run that lost its lease)."""
    for folder in folders:
        _revocations(spark).revoke(folder)


def restore(spark: Any, folders: Iterable[str]) -> None:
    """Writes under `folders` allowed again in this JVM: a run that holds the job's lease now (an earlier run of the
    job in this process may have lost its lease and revoked them)."""
    for folder in folders:
        _revocations(spark).restore(folder)
