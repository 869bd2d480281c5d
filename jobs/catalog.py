"""The jobs StateOps runs: the four standard patterns, plus overrides from an optional TOML file.

STATEOPS_CONFIG (optional) points to a TOML file such as:

    [jobs.user_activity]
    watermark_delay = "20 minutes"
    shuffle_partitions = 8
"""
from __future__ import annotations

import os
import tomllib
from typing import Any, Mapping

from stateops.errors import ConfigError
from stateops.layout import Layout
from stateops.roots import Roots

from jobs.spec import InputSpec, JobSpec, check_paths, validate, with_overrides
from jobs.transforms import TRANSFORMATIONS

EVENTS = InputSpec(
    "events", "event_id STRING, user_id STRING, event_time TIMESTAMP, action STRING, value DOUBLE", "event_time"
)
ORDERS = InputSpec("orders", "order_id STRING, user_id STRING, order_time TIMESTAMP, amount DOUBLE", "order_time")
PAYMENTS = InputSpec(
    "payments", "payment_id STRING, order_id STRING, payment_time TIMESTAMP, amount DOUBLE", "payment_time"
)

BUILTIN: tuple[JobSpec, ...] = (
    JobSpec(
        name="user_activity", inputs=(EVENTS,), transformation="user_activity", output_mode="update",
        sink_table="user_activity", merge_keys=("window_start", "window_end", "user_id"),
        output_time_column="window_start",
        watermark_delay="10 minutes", watermark_min="5 minutes", watermark_max="2 hours",
        description="Dedup by event_id within the watermark, then 5-minute windows per user (count, sum).",
    ),
    JobSpec(
        name="user_sessions", inputs=(EVENTS,), transformation="user_sessions", output_mode="append",
        sink_table="user_sessions", idempotent_key=("user_id", "session_start"), output_time_column="session_start",
        watermark_delay="30 minutes", watermark_min="15 minutes", watermark_max="6 hours",
        description="Session windows per user with a 15-minute inactivity gap.",
    ),
    JobSpec(
        name="order_payments", inputs=(ORDERS, PAYMENTS), transformation="order_payments",
        output_mode="append", sink_table="order_payments", idempotent_key=("order_id", "payment_id"),
        output_time_column="order_time",
        watermark_delay="2 minutes", watermark_min="1 minute", watermark_max="30 minutes",
        description="Orders joined with their payment made within 5 minutes.",
    ),
    JobSpec(
        name="user_actions", inputs=(EVENTS,), transformation="user_actions", output_mode="append",
        sink_table="user_actions", idempotent_key=("user_id", "first_event_time"),
        output_time_column="first_event_time",
        watermark_delay="10 minutes", watermark_min="5 minutes", watermark_max="2 hours",
        description="Running action count and last action per user; a final row after 30 quiet minutes.",
    ),
)


def load_config(path: str | None) -> Mapping[str, Any]:
    if not path:
        return {}
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError("STATEOPS_CONFIG", f"file {path!r} does not exist",
                          "point it to a TOML file, or unset it to use the built-in jobs") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError("STATEOPS_CONFIG", f"{path!r} is not valid TOML ({err})",
                          "fix the syntax; see README.md, Configuration") from None


def load_jobs(config_path: str | None = None, layout: Layout | None = None) -> dict[str, JobSpec]:
    """All jobs by name, validated, with the config file's overrides applied (paths checked under
    `layout`, default: $STATEOPS_HOME)."""
    config = load_config(config_path if config_path is not None else os.environ.get("STATEOPS_CONFIG"))
    overrides = config.get("jobs", {})
    specs = {spec.name: spec for spec in BUILTIN}
    for name, values in overrides.items():
        if name not in specs:
            raise ConfigError(f"jobs.{name}", "is not a known job", f"use one of {sorted(specs)}")
        specs[name] = with_overrides(specs[name], values)
    jobs = {name: validate(spec, TRANSFORMATIONS) for name, spec in specs.items()}
    check_paths(jobs.values(), layout or Layout.from_env())
    return jobs


def get_job(name: str, config_path: str | None = None) -> JobSpec:
    jobs = load_jobs(config_path)
    if name not in jobs:
        raise ConfigError("job", f"unknown job {name!r}", f"use one of {sorted(jobs)} (stateops jobs list)")
    return jobs[name]


def job_roots(layout: Layout, config_path: str | None = None) -> Roots:
    """The roots guard for every configured job (checkpoints configured outside the home included)."""
    jobs = load_jobs(config_path, layout)
    return Roots.from_layout(layout, {name: spec.checkpoint_path(layout) for name, spec in jobs.items()})
