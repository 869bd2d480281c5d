"""One engine for every journaled runbook: recovery (stateops.recovery), the home move (stateops.relocation), and
the lost-lock rule retention's runs follow too.

A runbook is a list of named steps acted one by one by one process at a time. The engine keeps what they share, so
that each runbook is only its steps (the shape of a Kubernetes operator: one controller loop, one reconciler per
resource):

  journal.py   the journal of steps (phase, details, times) in the runbook's own folder, read back to resume;
               the heartbeat lock that says which process acts now; an optional mirror of every entry (recovery's
               `actions` ops table) and a report callback (a terminal, a Dagster op's log)
  holding.py   locks held with a heartbeat and the one rule when one is lost: the holder stops before its next
               write, says so in one line (RunbookStopped, exit 1), and its mirror journals it
  steps.py     the step loop: a step journaled `done` is skipped (reported `skipped`), one journaled `started` only
               runs again (or, when it is not idempotent, is judged by the runbook's `completed` check), every
               step `started` before it acts and `done` or `failed` after, with the fault points
               `<kind>.before_done` and `<kind>.after_step` (stateops.faults)
"""
from stateops.runbooks.holding import Holding, RunbookBusy, RunbookStopped
from stateops.runbooks.journal import Journal, StepEvent, read_entries, running
from stateops.runbooks.steps import Step, run_step, run_steps

__all__ = ["Holding", "Journal", "RunbookBusy", "RunbookStopped", "Step", "StepEvent", "read_entries", "run_step",
           "run_steps", "running"]
