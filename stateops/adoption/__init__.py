"""Adoption: an existing job's checkpoint, table and input brought under StateOps without reprocessing.

A user's plain Structured Streaming query already keeps state in its checkpoint and wrote its table. Adopting it
keeps all three: StateOps' run of the job resumes the same checkpoint (the same query id, batches and state), into
the same Delta table, from the same input, and reads only what the old query had not read.

    evidence.py  what the checkpoint, the input and the table say (batches, a batch in flight, the sources' files or
                 topics, who wrote the table's batches), read with the storage layer only
    plan.py      the plan as data (AdoptionPlan) and its refusals, each one line naming why and the fix
    record.py    what `--confirm` writes: the adoption's record (with where dead letters start: the old query's
                 files, or Kafka offsets) in the overrides table and the job's control folder, the `adopt` action;
                 and reading it back (the sink's batches already written)

The Spark part (the changed-query check, the query's source order) is stateops.jobs.runtime.adoption.
"""
