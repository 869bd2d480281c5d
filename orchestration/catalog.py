"""The job catalog of this code location, loaded once when it loads: every capability's definitions are built
from it (the set of jobs is fixed per code location load; the home is read at run time by the paths resource)."""
from __future__ import annotations

from jobs.catalog import load_jobs
from jobs.spec import JobSpec

SPECS: dict[str, JobSpec] = load_jobs()
