"""`python -m stateops.cli ...` is `stateops ...` (the runbook starts long-running restarts this way)."""
from stateops.cli.main import main

main(prog_name="stateops")
