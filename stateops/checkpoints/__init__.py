"""Spark's checkpoint, the one place its files are read and written (a rewind's cut, a batch's metadata, the runbook's
archive): the folders other capabilities ask about instead of reading them themselves (tests/unit/test_import_graph.py
checks that no module outside this room names them).

    checkpoint     a checkpoint as data: batches (offsets, commits, metadata), file sources and their logs, state
                   files per operator, partition, store and version; the few writes of its logs (a batch's metadata)
    source_log     the file source's log: its format, the paths it names, how Spark names a file (spark_form)
    operators      each operator's metadata and schema files, and its state files on disk (bytes per partition);
                   `describe`: an operator from its store folders and schema files where Spark wrote no metadata
                   (checkpoints written before Spark 4.0)
    schemas        where the stores' schema files are, and a copy of them alone (what `jobs check` plans against)
    profile        what kind of state a store holds, from its schema (pure)
    state_store    the store and formats a checkpoint runs with, and which a new one gets
    sparkstate     what reading or writing a checkpoint's state through Spark needs (the coordinator, the stores
                   listed by Spark's state-metadata or, before Spark 4.0, by the files, reader options)
    kafka_offsets  a Kafka source's offsets in the offset log, and the broker's
    listing        one recursive listing of a tree (sizes, times), small files read in parallel
    restart        what a restart from batch N needs; which batches are restorable; what is history
    rewind         the rewind cut: a stopped checkpoint back to batch N (the recovery runbook's surgery)
    placement      a job's checkpoint and landing where its checkpoint says they were (checked before every run)
    archive        the runbook's archive of a checkpoint: its format, names, manifest and verification
"""
