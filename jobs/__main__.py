"""`python -m jobs ...` is `stateops ...` (the runbook starts long-running restarts this way)."""
from jobs.cli import main

main(prog_name="stateops")
