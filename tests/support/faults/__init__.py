"""The Jepsen-style fault harness's primitives (docs/operations.md, "One writer under freezes, delays and partitions:
the fence", says what it tests and how): two StateOps processes run one job, each talking to the S3 server through
its own fault proxy, while the test pauses, delays, partitions and kills them, then judges the run from the write
history.

- proxy          FaultProxy: an HTTP reverse proxy per process (its `label`) to moto, with hold/release/drop of
                 one request, delay, partition/heal, and the log of every request (proxy_log: Entry, render;
                 s3_operations: keys and S3 operation names of requests on the wire).
- history        the bucket's versions as the write history: commit points written more than once.
- local_history  the same for a home on local disk: every creation of a file name, from inotify.
- processes      a StateOps process in its own process group: freeze/thaw (whole, or the Python driver only),
                 crash, its JVM's pid, its exit code and output.
- scenarios      the faults as objects (a nemesis each: arm, inject, end); trial.py runs one, invariants.py judges it.
"""
