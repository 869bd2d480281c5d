"""StateOps in Dagster (installed as `stateops.dagster`): `build_defs` for a user's own definitions, the
`StateOpsComponent` for a `dg` project, and the repository's own code location (definitions.py)."""
from stateops.dagster.component import StateOpsComponent
from stateops.dagster.factory import build_defs

__all__ = ["StateOpsComponent", "build_defs"]
