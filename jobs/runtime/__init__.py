"""The Spark runtime: the session factory, sources, the exactly-once sink, the query plan, failures, the progress
listener and the runner that starts, polls and stops a job's queries; the runbook's and retention's Spark sides."""
