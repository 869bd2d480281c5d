"""A checkpoint's files as data, shared by retention and the recovery runbook (neither owns them):

    listing    one recursive listing of a tree (sizes, times), small files read in parallel, RocksDB zip metadata
    restart    what a restart from batch N needs; which batches are restorable; what is history
"""
