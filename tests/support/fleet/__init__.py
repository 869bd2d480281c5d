"""The fleet soak (issue 53): several StateOps homes, each with its jobs running continuously at once, its Dagster
daemon with every sensor and the deep-audit and retention schedules on short crons, new input landing all along,
and a nemesis (faults of tests/support/faults) acting at random; at the end every job stopped, run once more, and
the invariants checked.

    homes.py      a home of the fleet: its config, Dagster instance, daemon, jobs, input and the logs kept
    nemesis.py    the faults the nemesis picks from, each with its own end
    watch.py      what the soak observes while it runs: leases and takeovers, processes' memory
    checks.py     the invariants at the end, and the figures the soak prints
    soak.py       the whole run (`python -m tests.support.fleet.soak --minutes 60`; tests/e2e/test_fleet_soak.py)
"""
