"""The fence: one writer per job, and a writer that lost the right to write writes nothing more.

Its Python side, in one room (its Java side is jvm/fence/src/io/stateops/fence, built into
stateops/jvm/stateops-fence.jar by scripts/build-fence-jar; the names here are the Java ones):

  lease.py        the lease record (who runs the job's queries; live or stale) and its errors
  holder.py       holding the lease: taken under the job's control lock with the maintenance lock checked, heartbeated,
                  checked before each write (`ensure_held`), released; what a holder does the moment it finds the
                  lease lost (`when_lost`)
  revocations.py  io.stateops.fence.Revocations from Python: `revoke` a job's folders in the JVM (no write of the
                  JVM's under them from then on) and `restore` them (a run that holds the lease again)
  writes.py       a query's foreachBatch target behind the lease (Fenced), and `fence_run`: a run's writes put
                  behind its lease, and the order in which a loss stops them
  session.py      the Spark settings that put the jar's create-once commit points in force (the checkpoint file
                  manager, Delta's log store), as data

The control plane around it (stop requests, the maintenance lock, the control records and their lock) is
stateops.control; the fault trials that prove the fence are tests/e2e/test_fence.py.
"""
