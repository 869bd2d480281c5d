"""Dagster sensors (skew, growth, query health) read the ops tables only, never a Spark session."""
