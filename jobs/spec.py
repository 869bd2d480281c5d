"""A validated model per job. Every problem names the field and the fix, at load time.

A job is defined by a JobSpec: in Python (jobs.catalog's examples, or a package's `stateops.jobs` entry
point) or as a `[jobs.<name>]` table of the config file (`spec_from_config`). Every definition is checked
the same way, its transformation included (jobs.transformation: it imports, its parameters fit).
"""
from __future__ import annotations

import json
import os
import posixpath
import re
from bisect import bisect_left
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterable, Mapping, get_type_hints

from stateops.durations import parse_seconds
from stateops.errors import ConfigError
from stateops.joins import JoinBound
from stateops.layout import Layout

SOURCE_KINDS = ("json", "kafka")
KAFKA_OWNED_OPTIONS = ("subscribe", "subscribepattern", "assign", "kafka.bootstrap.servers", "startingoffsets",
                       "startingoffsetsbytimestamp", "startingtimestamp", "failondataloss", "includeheaders")
OUTPUT_MODES = ("append", "update")
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_COLUMN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s+([A-Za-z]+(?:\([0-9, ]+\))?)\s*$")
_TYPES = {"string", "timestamp", "double", "long", "int", "integer", "boolean", "date", "float", "bigint"}


def default_shuffle_partitions() -> int:
    """Sized to the machine: two tasks per core (measured ~10x faster than Spark's 200 on 2 cores)."""
    return max(2, 2 * (os.cpu_count() or 1))


@dataclass(frozen=True)
class InputSpec:
    """One input stream: a landing source (or Kafka topic), its schema and its event-time column."""

    name: str
    schema: str  # DDL: "event_id STRING, event_time TIMESTAMP, ..."
    time_column: str

    def columns(self) -> dict[str, str]:
        return parse_schema(self.schema, f"inputs.{self.name}.schema")


@dataclass(frozen=True)
class StreamJoin:
    """A stream-stream join of two inputs: `lower <= right time - left time <= upper` (the inputs' time
    columns). The transformation builds its condition from it, the audit judges overdue join state and
    explain-key late or waiting rows by it (stateops.joins)."""

    left: str
    right: str
    upper: str
    lower: str = "0 seconds"

    @property
    def bound(self) -> JoinBound:
        return JoinBound(lower_seconds=_signed(self.lower), upper_seconds=_signed(self.upper))


@dataclass(frozen=True)
class ExplainSpec:
    """What explain-key needs beyond the state: where the key is in the inputs and the output, and how long
    after its event time an input row still counts as on time (a session window: its gap)."""

    key_columns: dict[str, str] = field(default_factory=dict, hash=False)  # input -> column holding the key
    output_key_columns: tuple[str, ...] = ()  # output columns holding it (default: merge_keys)
    late_margin: str = "0 seconds"

    @property
    def late_margin_seconds(self) -> int:
        return parse_seconds(self.late_margin) or 0  # validated at load


@dataclass(frozen=True)
class JobSpec:
    name: str
    inputs: tuple[InputSpec, ...]
    transformation: str
    output_mode: str
    sink_table: str
    watermark_delay: str
    watermark_min: str
    watermark_max: str
    merge_keys: tuple[str, ...] = ()
    # Append sinks: the output columns that identify a row, so a replay (a rebuild) inserts a row only if absent.
    idempotent_key: tuple[str, ...] = ()
    # The output column where a row's event-time span starts (a rebuild's write floor and replay horizon).
    output_time_column: str | None = None
    # Where the runbook keeps this job's archives (default: ops/<job>/archives under STATEOPS_HOME).
    archive_dir: str | None = None
    source: str = "json"
    shuffle_partitions: int = field(default_factory=default_shuffle_partitions)
    trigger_interval: str = "10 seconds"
    max_files_per_trigger: int = 1
    checkpoint: str | None = None
    kafka_bootstrap_servers: str | None = None
    # Passed to Spark's Kafka source as they are: consumer settings (`kafka.security.protocol`, ...) and source
    # options (`maxOffsetsPerTrigger`, ...); the topics, brokers and starting offsets are StateOps' own.
    kafka_options: dict[str, str] = field(default_factory=dict, hash=False)
    future_tolerance: str = "1 day"
    description: str = ""
    join: StreamJoin | None = None
    explain: ExplainSpec = field(default_factory=ExplainSpec)
    owners: tuple[str, ...] = ()  # e-mail addresses or "team:<name>" (Dagster asset owners)
    tags: dict[str, str] = field(default_factory=dict, hash=False)  # Dagster asset tags
    # The Dagster asset group of the job's assets (default: its first team owner's name, else streaming_jobs).
    group: str | None = None

    @property
    def watermark_seconds(self) -> int:
        return parse_seconds(self.watermark_delay)  # validated at load

    @property
    def future_tolerance_seconds(self) -> int:
        """How far a row's event time may lie ahead of its arrival before it is a dead letter."""
        return parse_seconds(self.future_tolerance)  # validated at load

    def checkpoint_path(self, layout: Layout) -> str:
        return self.checkpoint or layout.checkpoint(self.name)

    def archive_path(self, layout: Layout) -> str:
        return self.archive_dir or layout.archives(self.name)

    @property
    def row_key(self) -> tuple[str, ...]:
        """The columns that identify an output row: merge keys (update mode) or the idempotent key (append)."""
        return self.merge_keys if self.output_mode == "update" else self.idempotent_key

    def input(self, name: str) -> InputSpec:
        return next(i for i in self.inputs if i.name == name)

    @property
    def join_bound(self) -> JoinBound | None:
        """The time bound of the job's stream-stream join (None: it has none)."""
        return self.join.bound if self.join else None


def parse_schema(ddl: str, field_name: str) -> dict[str, str]:
    """Column name -> type from a simple DDL string; refuses anything it cannot read."""
    columns: dict[str, str] = {}
    for part in (ddl or "").split(","):
        match = _COLUMN.match(part)
        if not match or match.group(2).lower().split("(")[0] not in _TYPES:
            raise ConfigError(field_name, f"cannot read column definition {part.strip()!r}",
                              "write columns as 'name TYPE, ...' with types like STRING, TIMESTAMP, DOUBLE")
        columns[match.group(1)] = match.group(2).lower()
    return columns


def _seconds(spec_field: str, value: Any) -> int:
    seconds = parse_seconds(value)
    if seconds is None:
        raise ConfigError(spec_field, f"{value!r} is not an interval",
                          'write a number and a unit, e.g. "10 minutes" or "30 seconds"')
    return seconds


def _signed(text: str) -> int | None:
    """Seconds of an interval that may be negative ("-5 minutes"); None when it is none."""
    negative = isinstance(text, str) and text.strip().startswith("-")
    seconds = parse_seconds(text.strip()[1:] if negative else text)
    return None if seconds is None else -seconds if negative else seconds


_HINTS = get_type_hints(JobSpec)
_KIND_NAMES = {bool: "a boolean", int: "an integer", float: "a decimal number", str: "text", list: "a list",
               tuple: "a list", dict: "a table"}


def _kind(value: Any) -> str:
    return _KIND_NAMES.get(type(value), type(value).__name__)


def _check_types(spec: JobSpec, where: str) -> None:
    """Types before values: TOML `true` is not a count, and "user_id" is not a list of columns."""
    for f in fields(JobSpec):
        value, hint, spec_field = getattr(spec, f.name), _HINTS[f.name], f"{where}.{f.name}"
        if hint is int and type(value) is not int:  # bool is an int subclass: refuse it explicitly
            raise ConfigError(spec_field, f"{value!r} is {_kind(value)}, not a whole number",
                              f"write a whole number without quotes, e.g. {f.name} = 4")
        if hint in (str, str | None) and not isinstance(value, str) and not (value is None and hint != str):
            raise ConfigError(spec_field, f"{value!r} is {_kind(value)}, not text",
                              f'write it in quotes, e.g. {f.name} = "..."')
        if hint == dict[str, str] and not (isinstance(value, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
            raise ConfigError(spec_field, f"{value!r} is {_kind(value)}, not a table of text values",
                              f'write a table, e.g. {f.name} = {{ team = "growth" }}')
        if hint == tuple[str, ...] and not (isinstance(value, tuple) and all(isinstance(v, str) for v in value)):
            example = json.dumps([value] if isinstance(value, str) else ["window_start", "user_id"])
            raise ConfigError(spec_field, f"{value!r} is {_kind(value)}, not a list of column names",
                              f"write a list, e.g. {f.name} = {example}")


def _check_checkpoint(spec: JobSpec, where: str) -> None:
    if spec.checkpoint is None:
        return
    if not spec.checkpoint.strip() or not (_URL.match(spec.checkpoint) or os.path.isabs(spec.checkpoint)):
        raise ConfigError(f"{where}.checkpoint", f"{spec.checkpoint!r} is not an absolute path or a URL",
                          "write an absolute path or a URL (e.g. s3://bucket/checkpoints/job), or remove it "
                          "to use $STATEOPS_HOME/checkpoints/<job>")


def validate(spec: JobSpec) -> JobSpec:
    """Check every field of `spec`; return it unchanged or raise ConfigError naming the field. Its
    transformation (an import) is checked by the catalog after this (jobs.transformation.check)."""
    if not isinstance(spec.name, str) or not _NAME.match(spec.name):
        raise ConfigError("name", f"{spec.name!r} is not a valid job name",
                          "use lower-case letters, digits and underscores, starting with a letter")
    where = f"jobs.{spec.name}"
    _check_types(spec, where)
    if spec.source not in SOURCE_KINDS:
        raise ConfigError(f"{where}.source", f"unknown source {spec.source!r}", f"use one of {SOURCE_KINDS}")
    if spec.source == "kafka" and not spec.kafka_bootstrap_servers:
        raise ConfigError(f"{where}.kafka_bootstrap_servers", "is required for the kafka source",
                          "set it to the brokers, e.g. 'broker1:9092,broker2:9092'")
    owned = sorted(k for k in spec.kafka_options if k.lower() in KAFKA_OWNED_OPTIONS)
    if owned:
        raise ConfigError(f"{where}.kafka_options.{owned[0]}", "is set by StateOps",
                          "remove it: each input reads the topic of its name from kafka_bootstrap_servers, from "
                          "the earliest offset on a new checkpoint")
    if not spec.inputs:
        raise ConfigError(f"{where}.inputs", "no input stream", "declare at least one input")
    for inp in spec.inputs:
        columns = parse_schema(inp.schema, f"{where}.inputs.{inp.name}.schema")
        if inp.time_column not in columns:
            raise ConfigError(f"{where}.inputs.{inp.name}.time_column",
                              f"unknown column {inp.time_column!r}",
                              f"use one of the schema's columns: {sorted(columns)}")
        if columns[inp.time_column] != "timestamp":
            raise ConfigError(f"{where}.inputs.{inp.name}.time_column",
                              f"column {inp.time_column!r} is {columns[inp.time_column]}, not timestamp",
                              "the watermark needs a TIMESTAMP column")
    if len({i.name for i in spec.inputs}) < len(spec.inputs) or not all(_NAME.match(i.name) for i in spec.inputs):
        raise ConfigError(f"{where}.inputs", f"input names {[i.name for i in spec.inputs]} are not distinct "
                          "lower-case names", "name each input once (it names the landing folder or Kafka topic)")
    _check_join(spec, where)
    _check_explain(spec, where)
    _check_labels(spec, where)
    if spec.output_mode not in OUTPUT_MODES:
        raise ConfigError(f"{where}.output_mode", f"unknown output mode {spec.output_mode!r}",
                          f"use one of {OUTPUT_MODES}")
    if spec.output_mode == "update" and not spec.merge_keys:
        raise ConfigError(f"{where}.merge_keys", "update mode needs merge keys to MERGE into Delta",
                          "list the output columns that identify a row, e.g. ['window_start', 'user_id']")
    for name in ("merge_keys", "idempotent_key"):
        keys = getattr(spec, name)
        for key in keys:
            if not _IDENTIFIER.match(key) or keys.count(key) > 1:
                raise ConfigError(f"{where}.{name}", f"{key!r} is not a column name, or is listed twice",
                                  "list each output column once, e.g. ['window_start', 'user_id']")
    if spec.output_time_column is not None and not _IDENTIFIER.match(spec.output_time_column):
        raise ConfigError(f"{where}.output_time_column", f"{spec.output_time_column!r} is not a column name",
                          "name the output column where a row's event time starts, e.g. 'window_start'")
    if spec.archive_dir is not None and not os.path.isabs(spec.archive_dir):
        raise ConfigError(f"{where}.archive_dir", f"{spec.archive_dir!r} is not an absolute path",
                          "use an absolute local path under STATEOPS_HOME (the runbook's journal needs file "
                          "locks), or remove it to use $STATEOPS_HOME/ops/<job>/archives")
    if not _NAME.match(spec.sink_table or ""):
        raise ConfigError(f"{where}.sink_table", f"{spec.sink_table!r} is not a valid table name",
                          "use lower-case letters, digits and underscores")
    delay = _seconds(f"{where}.watermark_delay", spec.watermark_delay)
    low = _seconds(f"{where}.watermark_min", spec.watermark_min)
    high = _seconds(f"{where}.watermark_max", spec.watermark_max)
    if low > high:
        raise ConfigError(f"{where}.watermark_min", f"{spec.watermark_min!r} is above watermark_max "
                          f"{spec.watermark_max!r}", "make watermark_min <= watermark_max")
    if not low <= delay <= high:
        raise ConfigError(f"{where}.watermark_delay",
                          f"{spec.watermark_delay!r} is outside the allowed bounds "
                          f"[{spec.watermark_min}, {spec.watermark_max}]",
                          "choose a delay within the bounds, or widen the bounds deliberately")
    if spec.shuffle_partitions < 1:
        raise ConfigError(f"{where}.shuffle_partitions", f"{spec.shuffle_partitions!r} is not a positive "
                          "integer", "use a positive integer; it is fixed per checkpoint once the job ran")
    _seconds(f"{where}.trigger_interval", spec.trigger_interval)
    if spec.max_files_per_trigger < 1:
        raise ConfigError(f"{where}.max_files_per_trigger", f"{spec.max_files_per_trigger!r} is not a "
                          "positive integer", "use 1 or more (files per micro-batch)")
    if _seconds(f"{where}.future_tolerance", spec.future_tolerance) < 1:
        raise ConfigError(f"{where}.future_tolerance", f"{spec.future_tolerance!r} is not positive",
                          'use e.g. "1 day": rows further ahead of their arrival go to the dead letters')
    _check_checkpoint(spec, where)
    return spec


def _check_join(spec: JobSpec, where: str) -> None:
    join = spec.join
    if join is None:
        return
    names = [i.name for i in spec.inputs]
    for side in ("left", "right"):
        if getattr(join, side) not in names:
            raise ConfigError(f"{where}.join.{side}", f"{getattr(join, side)!r} is not an input of the job",
                              f"name one of the inputs {names}")
    if join.left == join.right:
        raise ConfigError(f"{where}.join.right", "is the same input as join.left", "join two different inputs")
    for end in ("lower", "upper"):
        if _signed(getattr(join, end)) is None:
            raise ConfigError(f"{where}.join.{end}", f"{getattr(join, end)!r} is not an interval",
                              'write e.g. "5 minutes" (lower may be negative: "-5 minutes")')
    if join.bound.lower_seconds > join.bound.upper_seconds:
        raise ConfigError(f"{where}.join.lower", f"{join.lower!r} is above join.upper {join.upper!r}",
                          "the join matches lower <= right time - left time <= upper: make lower <= upper")


def _check_explain(spec: JobSpec, where: str) -> None:
    explain = spec.explain
    for name, column in explain.key_columns.items():
        inp = next((i for i in spec.inputs if i.name == name), None)
        if inp is None or not isinstance(column, str) or column not in inp.columns():
            raise ConfigError(f"{where}.explain.key_columns", f"{name} = {column!r} is not a column of an input",
                              "map each input to its column holding the key, e.g. { events = \"user_id\" }")
    if not all(isinstance(c, str) and _IDENTIFIER.match(c) for c in explain.output_key_columns):
        raise ConfigError(f"{where}.explain.output_key_columns", f"{list(explain.output_key_columns)!r} is not a "
                          "list of column names", 'list the output columns holding the key, e.g. ["user_id"]')
    _seconds(f"{where}.explain.late_margin", explain.late_margin)


_EMAIL = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,7}$")
_TAG_KEY = re.compile(r"^([A-Za-z0-9_.-]{1,63}/)?[A-Za-z0-9_.-]{1,63}$")
_TAG_VALUE = re.compile(r"^[A-Za-z0-9_.-]{0,63}$")
_GROUP = re.compile(r"^[A-Za-z0-9_]{1,63}$")
DEFAULT_GROUP = "streaming_jobs"


def asset_group(spec: JobSpec) -> str:
    """The Dagster asset group of the job: `group` when set, else the name of its first team owner
    ("team:data-platform" -> data_platform), else streaming_jobs. A thousand jobs in one group are a list
    nobody reads; grouped by team, a person finds their team's jobs. Jobs without either (the built-ins)
    stay in streaming_jobs."""
    if spec.group:
        return spec.group
    team = next((o[len("team:"):] for o in spec.owners if o.startswith("team:")), None)
    return re.sub(r"[^A-Za-z0-9_]", "_", team)[:63] if team else DEFAULT_GROUP


def _check_labels(spec: JobSpec, where: str) -> None:
    """Owners, tags and group as Dagster accepts them on an asset, refused here with the field's name."""
    for owner in spec.owners:
        if not (_EMAIL.match(owner) or (owner.startswith("team:") and len(owner) > 5)):
            raise ConfigError(f"{where}.owners", f"{owner!r} is neither an e-mail address nor a team",
                              'write e.g. "ana@example.com" or "team:data-platform"')
    for key, value in spec.tags.items():
        if not _TAG_KEY.match(key) or not _TAG_VALUE.match(value):
            raise ConfigError(f"{where}.tags", f"{key!r} = {value!r} is not a valid tag",
                              "use letters, digits, '_', '.', '-' (at most 63 each; a key may have one 'prefix/')")
    if spec.group is not None and not _GROUP.match(spec.group):
        raise ConfigError(f"{where}.group", f"{spec.group!r} is not a valid asset group name",
                          'use letters, digits and underscores (at most 63), e.g. group = "payments"')


def check_output_columns(spec: JobSpec, columns: Iterable[str]) -> None:
    """Merge keys, idempotent key and output time column must be columns of the query's output (known once
    Spark has analysed the query)."""
    columns = set(columns)
    named = {"merge_keys": spec.merge_keys, "idempotent_key": spec.idempotent_key,
             "output_time_column": (spec.output_time_column,) if spec.output_time_column else ()}
    for name, keys in named.items():
        missing = [key for key in keys if key not in columns]
        if missing:
            raise ConfigError(f"jobs.{spec.name}.{name}", f"{missing} are not output columns",
                              f"use columns of the output: {sorted(columns)}")


def _norm(path: str) -> str:
    return path.rstrip("/") if _URL.match(path) else posixpath.normpath(path)


def _inside(a: str, b: str) -> bool:
    """`a` is `b` or lies under it (a filesystem root `/` holds every absolute path)."""
    a, b = _norm(a), _norm(b)
    return a == b or a.startswith(b.rstrip("/") + "/")


def _is_root(path: str) -> bool:
    """A filesystem root or a bucket (`/`, `s3://bucket`): no job's folder, and the roots guard would admit
    everything under it."""
    if _URL.match(path):
        return "/" not in path.split("://", 1)[1].strip("/")
    return not _norm(path).strip("/")


def _check_own_folder(spec: JobSpec, key: str, path: str, layout: Layout) -> None:
    if _is_root(path):
        raise ConfigError(f"jobs.{spec.name}.{key}", f"{path!r} is a filesystem root or a bucket",
                          f"give the job a {key} folder of its own, e.g. {path.rstrip('/')}/stateops/{spec.name}")
    if _inside(layout.home, path):
        raise ConfigError(f"jobs.{spec.name}.{key}", f"{path!r} contains the StateOps home {layout.home!r}",
                          f"give the job a {key} folder of its own, outside the home or under it")


class _Folders:
    """Named folders, each normalized once, that answer "which of you overlaps this path?" without comparing
    every pair: a path lies inside a folder whose key (normalized, trailing '/' stripped) is the path itself
    or the path up to one of its '/'s (one lookup per level), and the folders inside a path are one run of the
    sorted keys (those starting with the path and a '/'). The same answers as `_inside` both ways against each folder,
    at O(depth + log n) a path instead of O(n): a catalog of 1,000 jobs made check_paths half a million pairs."""

    def __init__(self, named: Iterable[tuple[str, str]]):
        self.names: list[str] = []
        self._by_key: dict[str, list[int]] = {}
        keyed: list[tuple[str, int]] = []
        for i, (what, path) in enumerate(named):
            key = _norm(path).rstrip("/")
            self.names.append(what)
            self._by_key.setdefault(key, []).append(i)
            keyed.append((key, i))
        keyed.sort()
        self._keys = [key for key, _ in keyed]
        self._order = [i for _, i in keyed]

    def overlapping(self, path: str) -> set[int]:
        """Positions of the folders `path` overlaps (is one of, lies inside, or holds)."""
        norm = _norm(path)
        outer = {norm.rstrip("/")} | {norm[:i] for i, ch in enumerate(norm) if ch == "/"}
        found = {i for key in outer for i in self._by_key.get(key, ())}
        prefix = norm.rstrip("/") + "/"
        at = bisect_left(self._keys, prefix)
        while at < len(self._keys) and self._keys[at].startswith(prefix):
            found.add(self._order[at])
            at += 1
        return found

    def first(self, path: str, admit: Callable[[int], bool] = lambda i: True) -> str | None:
        """The name of the first folder (in the order given) that `path` overlaps and `admit` admits."""
        found = [i for i in self.overlapping(path) if admit(i)]
        return self.names[min(found)] if found else None


def check_paths(specs: Iterable[JobSpec], layout: Layout) -> None:
    """A checkpoint belongs to one query: never shared, never a filesystem root, never around the home, never
    inside (or around) inputs, tables or ops. A configured archive folder likewise stays clear of every job's
    checkpoints and of everything but its own job's ops folder. Each refusal names the first clash in the
    order of the specs (areas first, then checkpoints); the folders are indexed (_Folders), so the check
    grows with the number of jobs, not with its square."""
    specs = list(specs)
    named: list[tuple[str, str]] = [("the ops tables", layout.ops_table(""))]
    for spec in specs:
        named += [(f"the landing zone of {i.name}", layout.landing(i.name)) for i in spec.inputs]
        named += [(f"the table {spec.sink_table}", layout.table(spec.sink_table)),
                  (f"the dead letters of {spec.name}", layout.deadletter_table(spec.name)),
                  (f"the dead-letter checkpoint of {spec.name}", layout.deadletter_checkpoint(spec.name)),
                  (f"the ops folder of {spec.name}", layout.ops_dir(spec.name))]
    others = _Folders(named)
    checkpoints = _Folders((f"the checkpoint of {spec.name}", spec.checkpoint_path(layout)) for spec in specs)
    for spec in specs:
        if spec.archive_dir is not None:
            _check_own_folder(spec, "archive_dir", spec.archive_dir, layout)
            own = f"the ops folder of {spec.name}"
            clash = others.first(spec.archive_dir, lambda i: others.names[i] != own) or checkpoints.first(
                spec.archive_dir)
            if clash:
                raise ConfigError(f"jobs.{spec.name}.archive_dir", f"{spec.archive_dir!r} overlaps {clash}",
                                  "give the job's archives a folder of their own (default: "
                                  "$STATEOPS_HOME/ops/<job>/archives)")
    for i, spec in enumerate(specs):
        path = spec.checkpoint_path(layout)
        clash = others.first(path) or checkpoints.first(path, lambda j: j > i)
        if clash:
            raise ConfigError(f"jobs.{spec.name}.checkpoint", f"{path!r} overlaps {clash}",
                              "give every job a checkpoint directory of its own, outside landing/, tables/ "
                              "and ops/ (default: $STATEOPS_HOME/checkpoints/<job>)")
        _check_own_folder(spec, "checkpoint", path, layout)


# What a `[jobs.<name>]` table must hold to define a job (otherwise it overrides a job defined elsewhere).
DEFINING = ("transformation", "inputs", "output_mode", "watermark_delay", "watermark_min", "watermark_max")
_DEFINITION_ONLY = {"name", "inputs", "transformation", "join"}
_EXPLAIN_EXAMPLE = ('[jobs.NAME.explain] key_columns = { events = "user_id" }, output_key_columns = ["user_id"], '
                    'late_margin = "0 seconds"')
_NESTED = {"inputs": ("name", "schema", "time_column"), "join": ("left", "right", "upper", "lower")}


def _nested(where: str, key: str, value: Any) -> Any:
    """`inputs` (a list of tables) and `join` (a table) from TOML into InputSpec / StreamJoin."""
    keys, example = _NESTED[key], {"inputs": '[[jobs.NAME.inputs]] with name, schema, time_column',
                                   "join": 'join = { left = "orders", right = "payments", upper = "5 minutes" }'}[key]
    tables = value if key == "inputs" else [value]
    if (key == "inputs" and not isinstance(value, list)) or not all(isinstance(t, dict) for t in tables):
        wanted = "a list of tables" if key == "inputs" else "a table"
        raise ConfigError(f"{where}.{key}", f"{value!r} is {_kind(value)}, not {wanted}", f"write {example}")
    built = []
    for table in tables:
        unknown = sorted(set(table) - set(keys))
        missing = [k for k in keys if k not in table and k != "lower"]
        if unknown or missing:
            raise ConfigError(f"{where}.{key}", f"{table!r}: " + (f"unknown key {unknown[0]!r}" if unknown else
                              f"{missing[0]!r} is missing"), f"give exactly {', '.join(keys)}; e.g. {example}")
        bad = next((k for k, v in table.items() if not isinstance(v, str)), None)
        if bad:
            raise ConfigError(f"{where}.{key}.{bad}", f"{table[bad]!r} is {_kind(table[bad])}, not text",
                              f'write it in quotes, e.g. {bad} = "..."')
        built.append(InputSpec(**table) if key == "inputs" else StreamJoin(**table))
    return tuple(built) if key == "inputs" else built[0]


def _explain(where: str, value: Any) -> ExplainSpec:
    known = {f.name for f in fields(ExplainSpec)}
    if not isinstance(value, dict) or set(value) - known:
        raise ConfigError(f"{where}.explain", f"{value!r} is not a table of {sorted(known)}",
                          f"write {_EXPLAIN_EXAMPLE}")
    keys, output = value.get("key_columns", {}), value.get("output_key_columns", [])
    if not isinstance(keys, dict) or not isinstance(output, list) or not isinstance(value.get("late_margin", ""), str):
        raise ConfigError(f"{where}.explain", f"{value!r}: key_columns is a table, output_key_columns a list, "
                          "late_margin text", f"write {_EXPLAIN_EXAMPLE}")
    return ExplainSpec(**{**value, "output_key_columns": tuple(output)})


def _converted(where: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """TOML values as JobSpec holds them: lists of names as tuples, nested tables as objects."""
    out = dict(values)
    for key, value in values.items():
        if key == "explain":
            out[key] = _explain(where, value)
        elif key in _NESTED:
            out[key] = _nested(where, key, value)
        elif _HINTS.get(key) == tuple[str, ...] and isinstance(value, list):
            out[key] = tuple(value)
    return out


def spec_from_config(name: str, table: Any) -> JobSpec:
    """A job defined by a `[jobs.<name>]` table of the config file (`transformation = "module:function"`,
    inputs, watermark, output mode, ...); checked by `validate` like every other definition."""
    where = f"jobs.{name}"
    if not isinstance(table, dict):
        raise ConfigError(where, f"{table!r} is {_kind(table)}, not a table", f"write [jobs.{name}] and its settings")
    known = {f.name for f in fields(JobSpec)} - {"name"}
    for key in table:
        if key not in known:
            raise ConfigError(f"{where}.{key}", "is not a job setting", f"use one of {sorted(known)}")
    missing = [key for key in DEFINING if key not in table]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}", "is required to define a job", f"set {', '.join(missing)} "
                          "(README.md, Your own jobs); to override a job defined elsewhere, use its name")
    return JobSpec(name=name, **{"sink_table": name, **_converted(where, table)})


def with_overrides(spec: JobSpec, overrides: Mapping[str, Any]) -> JobSpec:
    """Apply config-file overrides to a job defined elsewhere; unknown keys are errors, not silently ignored."""
    known = {f.name for f in fields(JobSpec)} - _DEFINITION_ONLY
    for key in overrides:
        if key not in known:
            raise ConfigError(f"jobs.{spec.name}.{key}", "is not a setting that can be overridden",
                              f"use one of {sorted(known)}")
    values = _converted(f"jobs.{spec.name}", overrides)
    _check_narrowing(spec, values)
    return replace(spec, **values)


def _check_narrowing(spec: JobSpec, overrides: Mapping[str, Any]) -> None:
    """A config file may narrow the built-in watermark bounds, never widen what it is checked against."""
    where, low, high = f"jobs.{spec.name}", spec.watermark_min, spec.watermark_max
    bounds = f"the built-in bounds [{low}, {high}]"
    for key in ("watermark_min", "watermark_max"):
        if key not in overrides:
            continue
        seconds = _seconds(f"{where}.{key}", overrides[key])
        if not _seconds(f"{where}.watermark_min", low) <= seconds <= _seconds(f"{where}.watermark_max", high):
            raise ConfigError(f"{where}.{key}", f"{overrides[key]!r} lies outside {bounds}",
                              f"a config file may only narrow the bounds: choose a value within [{low}, {high}]"
                              " (the bounds themselves belong to the job's definition)")
