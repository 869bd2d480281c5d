"""The job definition, no Spark: the job model (spec), the catalog of an entry point's jobs and config file, the
environment read once beside it, the settings in force (overrides), loading a transformation, and what an
operation acts on (targets)."""
