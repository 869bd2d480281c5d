"""Moving a home to other storage with every job's state (`stateops home move --to URL`): from the embedded default
(a local folder) to object storage, bucket to bucket, or back, without reprocessing.

A home cannot be copied as it is: the file source's logs in every checkpoint (`sources/<n>/<batch>`) name each input
file by its absolute URL, so a copy refers to the original (a restart fails with Spark's `Wrong basePath`, or, the
original gone, reads every file again); archive manifests, runbook journals and some ops tables name the home too.
Delta tables and RocksDB state files are relative to their folders.

  marker.py     the mark a moved home keeps (where it went): every entry point refuses a moved home
  rewrite.py    what names the old home, rewritten for the new one (the file source's log format kept; JSON
                records; the ops tables' path columns), as pure functions
  plan.py       the plan (data): what is copied per job and root, what is rewritten, what is left, the time it
                takes at the rate measured now, and the refusals (a running job, a destination in use)
  executor.py   the move as a runbook of its own: journaled in the new home, resumable, the old home locked,
                copied with checksums, rewritten, verified, marked, unlocked

The Spark side (the deep audits compared before and after) is stateops.jobs.runtime.relocation.
"""
