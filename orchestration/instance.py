"""The Dagster instance StateOps runs on: `$DAGSTER_HOME`, by default `$STATEOPS_HOME/dagster`, prepared with
orchestration/dagster.yaml (pools: one run per job at a time). The demo and `scripts/ui` share it, so the UI
shows what the demo did.

    python -m stateops.dagster.instance     prepare it for the UI and print its folder (scripts/ui)
"""
from __future__ import annotations

import os
import shutil
import sys

from stateops.errors import StateOpsError
from stateops.extras import require
from stateops.layout import Layout

SETTINGS = os.path.join(os.path.dirname(__file__), "dagster.yaml")


def dagster_home(layout: Layout) -> str:
    """$DAGSTER_HOME, else `dagster/` under the StateOps home (a local path)."""
    return os.environ.get("DAGSTER_HOME") or os.path.join(layout.home, "dagster")


def prepare(home: str) -> str | None:
    """Create `home` with StateOps' instance settings (an existing dagster.yaml is kept); a note when the
    existing settings set no pool limit, else None. Settings on PostgreSQL without the postgres extra: refused."""
    os.makedirs(home, exist_ok=True)
    settings = os.path.join(home, "dagster.yaml")
    if not os.path.exists(settings):
        shutil.copyfile(SETTINGS, settings)
        return None
    with open(settings) as handle:
        text = handle.read()
    if "dagster_postgres" in text:
        require("postgres", f"the Dagster instance in {settings} is on PostgreSQL")
    if "default_limit" not in text:
        return (f"note: {settings} sets no pool limit; add the concurrency block of orchestration/dagster.yaml "
                "(one run per job at a time)")
    return None


if __name__ == "__main__":
    try:
        require("ui", "the Dagster UI")
        home = dagster_home(Layout.from_env())
        note = prepare(home)
    except StateOpsError as err:
        sys.exit(f"stateops: {err}")
    if note:
        print(note, file=sys.stderr)
    print(home)
