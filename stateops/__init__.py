"""StateOps core: Dagster-free building blocks (paths, filesystem, Delta, ops tables)."""
