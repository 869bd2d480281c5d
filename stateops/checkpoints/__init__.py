"""Spark's checkpoint, the one place its files are read (and, for the runbook's archive, written): the folders other
capabilities ask about instead of reading them themselves.

    checkpoint     a checkpoint as data: batches (offsets, commits, metadata), file sources and their logs, state
                   files per operator, partition, store and version
    operators      each operator's metadata and schema files, and its state files on disk (bytes per partition)
    profile        what kind of state a store holds, from its schema (pure)
    state_store    the store and formats a checkpoint runs with, and which a new one gets
    sparkstate     what reading or writing a checkpoint's state through Spark needs (the coordinator, reader options)
    kafka_offsets  a Kafka source's offsets in the offset log, and the broker's
    listing        one recursive listing of a tree (sizes, times), small files read in parallel
    restart        what a restart from batch N needs; which batches are restorable; what is history
    archive        the runbook's archive of a checkpoint: its format, names, manifest and verification
"""
