"""Dagster layer: the streaming jobs as assets, their schedules and resources (see definitions.py)."""
