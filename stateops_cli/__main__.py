"""`python -m stateops_cli ...` is `stateops ...` (the runbook starts long-running restarts this way)."""
from stateops_cli.main import main

main(prog_name="stateops")
