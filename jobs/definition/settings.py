"""A job's effective settings: the spec default, then the config file, then the override in force.

The runner applies `effective_spec` when it starts; `jobs describe` shows `settings_report`: each value
and where it comes from. An override that no longer fits the job's bounds (the config file narrowed them
after it was set) stops the start with one line: it is neither applied nor silently ignored.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from stateops.checkpoints import state_store
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import overrides
from stateops.control.overrides import SHUFFLE_PARTITIONS, WATERMARK_DELAY, WatermarkBounds
from stateops.errors import ConfigError, StateOpsError
from stateops.layout import Layout

from stateops.jobs.definition.catalog import Catalog
from stateops.jobs.definition.spec import JobSpec

SHOWN = ("watermark_delay", "shuffle_partitions", "trigger_interval", "max_files_per_trigger")
CLI_NAMES = {WATERMARK_DELAY: "watermark", SHUFFLE_PARTITIONS: "shuffle-partitions"}  # stateops jobs override
SHUFFLE_NOTE = "applies to a new checkpoint only: an existing checkpoint keeps the value it was created with"


def watermark_bounds(spec: JobSpec) -> WatermarkBounds:
    return WatermarkBounds(spec.watermark_min, spec.watermark_max)


def _typed(setting: str, value: str) -> Any:
    return int(value) if setting == SHUFFLE_PARTITIONS else value


def effective_spec(spec: JobSpec, layout: Layout, forced: Mapping[str, overrides.Override] | None = None) -> JobSpec:
    """`spec` with the overrides in force applied, each re-checked against the job's current bounds.
    `forced`: the job's overrides in force, when the caller read them for every job at once
    (overrides.in_force_by_job); read here otherwise."""
    values = {}
    for setting, change in (overrides.in_force(layout, spec.name) if forced is None else forced).items():
        if setting not in overrides.SETTINGS:
            continue  # the runbook's sink settings: read by the runner itself (stateops.sinkstate)
        try:
            values[setting] = _typed(setting, overrides.validate(spec.name, setting, change.value,
                                                                 watermark_bounds(spec)))
        except ConfigError as err:
            raise ConfigError(f"override {setting} of {spec.name}",
                              f"set by {change.actor} at {change.changed_at.isoformat(timespec='seconds')}, "
                              f"no longer valid: {err.problem}",
                              f"clear it (stateops jobs override {spec.name} --clear {CLI_NAMES[setting]} "
                              "--reason ...) or set a valid value") from None
    return replace(spec, **values)


def _in_checkpoint(spec: JobSpec, layout: Layout) -> int | None:
    try:
        checkpoint = Checkpoint.open(spec.checkpoint_path(layout))
        batches = checkpoint.offset_batches()
        return checkpoint.shuffle_partitions(batches[-1]) if batches else None
    except (StateOpsError, OSError, ValueError):
        return None


def settings_report(spec: JobSpec, catalog: Catalog) -> dict[str, dict[str, Any]]:
    """Setting -> {value, source: spec default | config file | override, and who/when/why for overrides}."""
    layout, configured = catalog.layout, catalog.configured(spec.name)
    forced = overrides.in_force(layout, spec.name)
    report: dict[str, dict[str, Any]] = {}
    for setting in SHOWN:
        if setting in forced:
            change = forced[setting]
            entry = {**change.contract(), "value": _typed(setting, change.value), "source": "override"}
            try:
                overrides.validate(spec.name, setting, change.value, watermark_bounds(spec))
            except ConfigError as err:
                entry["problem"] = f"{err.problem}: runs refuse to start until it is cleared"
        elif setting in configured:
            entry = {"value": getattr(spec, setting), "source": "config file", "file": catalog.config.path}
        else:
            entry = {"value": getattr(spec, setting), "source": "spec default"}
        report[setting] = entry
    report[SHUFFLE_PARTITIONS].update(note=SHUFFLE_NOTE, in_checkpoint=_in_checkpoint(spec, layout))
    return report


def kept_formats(layout: Layout, job: str) -> tuple[state_store.Formats | None, str]:
    """The store and formats a rebuild kept for the job's next new checkpoint (its `state_formats` override), and
    where they come from."""
    kept = overrides.in_force(layout, job).get(overrides.STATE_FORMATS)
    if kept is None:
        return None, ""
    return state_store.Formats.from_json(kept.value), f"recorded by runbook {kept.runbook_id}"


def state_store_report(spec: JobSpec, layout: Layout, session_conf: Mapping[str, str]) -> dict[str, Any]:
    """`jobs describe`'s and the asset's state store block: store, changelog checkpointing, join format and
    checkpoint format in force, each with its source (stateops.checkpoints.state_store.in_force). `session_conf`: what
    STATEOPS_SPARK_CONF sets."""
    kept, source = kept_formats(layout, spec.name)
    return state_store.in_force(spec.checkpoint_path(layout), spec.state_store, kept, session_conf, source)
