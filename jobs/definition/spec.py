"""A validated model per job. Every problem names the field and the fix, when the spec is made.

A job is defined by a JobSpec: in Python (stateops.jobs.definition.catalog's examples, or a package's `stateops.jobs` entry
point) or as a `[jobs.<name>]` table of the config file (`spec_from_config`). Every definition is checked
the same way, by pydantic as the config file's other sections are (stateops.config): types strictly (TOML
`true` is no count, "8" no number, "user_id" no list of columns; a TOML list is a tuple and a TOML table a
nested spec), then the value rules below, each refusal one ConfigError naming the field and the fix. Its
transformation is checked by the catalog after that (stateops.jobs.definition.transformation: it imports, its parameters fit).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, field, fields, replace
from typing import Any, Iterable, Mapping

from pydantic import ConfigDict, StrictInt, StrictStr, ValidationError, model_validator
from pydantic.dataclasses import dataclass

from stateops.durations import parse_seconds
from stateops.errors import ConfigError
from stateops.extras import require
from stateops.joins import JoinBound
from stateops.layout import Layout
from stateops.references import holds_reference, resolve
from stateops.storage import can_lock, is_url
from stateops.checkpoints.state_store import STORES

from stateops.jobs.definition.schema_ddl import parse_schema

SOURCE_KINDS = ("json", "kafka")
KAFKA_OWNED_OPTIONS = ("subscribe", "subscribepattern", "assign", "kafka.bootstrap.servers", "startingoffsets",
                       "startingoffsetsbytimestamp", "startingtimestamp", "failondataloss", "includeheaders")
OUTPUT_MODES = ("append", "update")
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Scalars strict (StrictInt, StrictStr), containers lax: a TOML list is a tuple, a TOML table a nested spec.
MODEL = ConfigDict(extra="forbid")


def default_shuffle_partitions() -> int:
    """Sized to the machine: two tasks per core (measured ~10x faster than Spark's 200 on 2 cores)."""
    return max(2, 2 * (os.cpu_count() or 1))


@dataclass(frozen=True, config=MODEL)
class InputSpec:
    """One input stream: a landing source (or Kafka topic), its schema and its event-time column."""

    name: StrictStr
    schema: StrictStr  # DDL: "event_id STRING, event_time TIMESTAMP, ..."
    time_column: StrictStr
    # Where the input lands when it is not StateOps' own folder: a landing folder (absolute path or URL) for the
    # json source, a topic for Kafka (an adopted job reads where its checkpoint read: stateops.adoption).
    path: StrictStr | None = None

    def columns(self) -> dict[str, str]:
        return parse_schema(self.schema, f"inputs.{self.name}.schema")

    def landing(self, layout: Layout) -> str:
        """The json source's folder: `path`, else the home's landing zone of the input's name."""
        return self.path or layout.landing(self.name)

    @property
    def topic(self) -> str:
        """The Kafka source's topic: `path`, else the input's name."""
        return self.path or self.name


@dataclass(frozen=True, config=MODEL)
class StreamJoin:
    """A stream-stream join of two inputs: `lower <= right time - left time <= upper` (the inputs' time
    columns). The transformation builds its condition from it, the audit judges overdue join state and
    explain-key late or waiting rows by it (stateops.joins)."""

    left: StrictStr
    right: StrictStr
    upper: StrictStr
    lower: StrictStr = "0 seconds"

    @property
    def bound(self) -> JoinBound:
        return JoinBound(lower_seconds=_signed(self.lower), upper_seconds=_signed(self.upper))


@dataclass(frozen=True, config=MODEL)
class ExplainSpec:
    """What explain-key needs beyond the state: where the key is in the inputs and the output, and how long
    after its event time an input row still counts as on time (a session window: its gap)."""

    key_columns: dict[StrictStr, StrictStr] = field(default_factory=dict, hash=False)  # input -> its key column
    output_key_columns: tuple[StrictStr, ...] = ()  # output columns holding it (default: merge_keys)
    late_margin: StrictStr = "0 seconds"

    @property
    def late_margin_seconds(self) -> int:
        return parse_seconds(self.late_margin) or 0  # validated at load


@dataclass(frozen=True, config=MODEL)
class JobSpec:
    name: StrictStr
    inputs: tuple[InputSpec, ...]
    transformation: StrictStr
    output_mode: StrictStr
    sink_table: StrictStr
    watermark_delay: StrictStr
    watermark_min: StrictStr
    watermark_max: StrictStr
    merge_keys: tuple[StrictStr, ...] = ()
    # Append sinks: the output columns that identify a row, so a replay (a rebuild) inserts a row only if absent.
    idempotent_key: tuple[StrictStr, ...] = ()
    # The output column where a row's event-time span starts (a rebuild's write floor and replay horizon).
    output_time_column: StrictStr | None = None
    # Where the runbook keeps this job's archives (default: ops/<job>/archives under STATEOPS_HOME).
    archive_dir: StrictStr | None = None
    source: StrictStr = "json"
    shuffle_partitions: StrictInt = field(default_factory=default_shuffle_partitions)
    trigger_interval: StrictStr = "10 seconds"
    max_files_per_trigger: StrictInt = 1
    checkpoint: StrictStr | None = None
    # The state store of a new checkpoint: "rocksdb" or "memory" (Spark's HDFS-backed store, in executor heap).
    # Unset: the store of the checkpoint a rebuild replaced, else the session's (RocksDB). An existing checkpoint
    # keeps its own: Spark pins it (stateops.checkpoints.state_store).
    state_store: StrictStr | None = None
    kafka_bootstrap_servers: StrictStr | None = None
    # Passed to Spark's Kafka source as they are: consumer settings (`kafka.security.protocol`, ...) and source
    # options (`maxOffsetsPerTrigger`, ...); the topics, brokers and starting offsets are StateOps' own.
    kafka_options: dict[StrictStr, StrictStr] = field(default_factory=dict, hash=False)
    future_tolerance: StrictStr = "1 day"
    description: StrictStr = ""
    join: StreamJoin | None = None
    explain: ExplainSpec = field(default_factory=ExplainSpec)
    owners: tuple[StrictStr, ...] = ()  # e-mail addresses or "team:<name>" (Dagster asset owners)
    tags: dict[StrictStr, StrictStr] = field(default_factory=dict, hash=False)  # Dagster asset tags
    # The Dagster asset group of the job's assets (default: its first team owner's name, else streaming_jobs).
    group: StrictStr | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _refused(cls, values: Any, handler: Any) -> Any:
        """A type pydantic refuses becomes one ConfigError naming the field (the value rules raise their own)."""
        try:
            return handler(values)
        except ValidationError as err:
            raise type_error(_name_of(values), err) from None

    @model_validator(mode="after")
    def _checked(self) -> "JobSpec":
        """The value rules; a job holding `${env:NAME}` references is checked with their values where they are
        all set now, else when a run, an audit or a runbook resolves them (resolved())."""
        values = asdict(self)
        if not holds_reference(values):
            check_values(self)
            return self
        try:
            values = resolve(values, f"jobs.{self.name}")
        except ConfigError:
            return self  # a variable not set here (a code location, `jobs describe`): checked when resolved
        JobSpec(**values)
        return self

    @property
    def watermark_seconds(self) -> int:
        return parse_seconds(self.watermark_delay)  # validated at load

    @property
    def future_tolerance_seconds(self) -> int:
        """How far a row's event time may lie ahead of its arrival before it is a dead letter."""
        return parse_seconds(self.future_tolerance)  # validated at load

    def checkpoint_path(self, layout: Layout) -> str:
        return self.checkpoint or layout.checkpoint(self.name)

    def sink_path(self, layout: Layout) -> str:
        """The output Delta table: `sink_table` when it is a path or URL (an existing table), else the home's
        table of that name."""
        return self.sink_table if is_location(self.sink_table) else layout.table(self.sink_table)

    @property
    def output_asset(self) -> str:
        """The output table's Dagster asset name: `sink_table` when it is a name, else the job's name."""
        return self.name if is_location(self.sink_table) else self.sink_table

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

    def require_extras(self) -> None:
        """Refuse, in one line naming the extra, a run or a read of this job whose extra is not installed: a Kafka
        job's brokers are asked with confluent-kafka (stateops.checkpoints.kafka_offsets) by the runbook and
        explain-key."""
        if self.source == "kafka":
            require("kafka", f"job {self.name} reads Kafka")


def is_location(text: str | None) -> bool:
    """An absolute path or a URL (a folder or table of its own), as opposed to a name under the home."""
    return bool(text) and (is_url(text) or os.path.isabs(text))


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


_KIND_NAMES = {bool: "a boolean", int: "an integer", float: "a decimal number", str: "text", list: "a list",
               tuple: "a list", dict: "a table"}
_NESTED = {"inputs": ("name", "schema", "time_column", "path"), "join": ("left", "right", "upper", "lower"),
           "explain": ("key_columns", "output_key_columns", "late_margin")}
_EXAMPLES = {"inputs": "[[jobs.NAME.inputs]] with name, schema, time_column",
             "join": 'join = { left = "orders", right = "payments", upper = "5 minutes" }',
             "explain": '[jobs.NAME.explain] key_columns = { events = "user_id" }, output_key_columns = ["user_id"], '
                        'late_margin = "0 seconds"'}


def _kind(value: Any) -> str:
    return _KIND_NAMES.get(type(value), type(value).__name__)


def _name_of(values: Any) -> Any:
    """The job's name from what JobSpec was called with (keywords, or the first positional argument)."""
    kwargs = getattr(values, "kwargs", None) or (values if isinstance(values, Mapping) else {})
    args = getattr(values, "args", None) or ()
    return kwargs.get("name", args[0] if args else None)


def type_error(job: Any, err: ValidationError) -> ConfigError:
    """Pydantic's first refusal of a JobSpec in the config file's words: the field, what the value is, the fix."""
    first = err.errors(include_url=False)[0]
    loc, value, kind = [str(part) for part in first["loc"]], first.get("input"), first["type"]
    where = f"jobs.{job}" if isinstance(job, str) else "jobs"
    key = loc[0] if loc else ""
    if key == "name":
        return ConfigError("name", f"{value!r} is not a valid job name",
                           "use lower-case letters, digits and underscores, starting with a letter")
    if kind == "unexpected_keyword_argument" and len(loc) == 1:
        known = sorted(f.name for f in fields(JobSpec) if f.name != "name")
        return ConfigError(f"{where}.{key}", "is not a job setting", f"use one of {known}")
    if key in _NESTED:
        return _nested_error(where, key, loc[1:], value, kind)
    hint = next((f.type for f in fields(JobSpec) if f.name == key), "")  # as written above: "StrictInt", ...
    if hint == "StrictInt":
        return ConfigError(f"{where}.{key}", f"{value!r} is {_kind(value)}, not a whole number",
                           f"write a whole number without quotes, e.g. {key} = 4")
    if hint.startswith("dict"):
        table = first["input"] if len(loc) == 1 else "a value"
        return ConfigError(f"{where}.{key}", f"{table!r} is not a table of text values",
                           f'write a table, e.g. {key} = {{ team = "growth" }}')
    if hint.startswith("tuple"):
        example = json.dumps([value] if isinstance(value, str) else ["window_start", "user_id"])
        words = "names" if key == "owners" else "column names"
        return ConfigError(f"{where}.{key}", f"{value!r} is {_kind(value)}, not a list of {words}",
                           f"write a list, e.g. {key} = {example}")
    return ConfigError(f"{where}.{key}", f"{value!r} is {_kind(value)}, not text",
                       f'write it in quotes, e.g. {key} = "..."')


def _nested_error(where: str, key: str, inner: list[str], value: Any, kind: str) -> ConfigError:
    """`inputs` (a list of tables), `join` and `explain` (tables): what is wrong inside, with an example."""
    keys, fix = _NESTED[key], f"write {_EXAMPLES[key]}"
    if key == "inputs" and inner:
        inner = inner[1:]  # past the list position
    if not inner:
        wanted = "a list of tables" if key == "inputs" and kind == "tuple_type" else "a table"
        return ConfigError(f"{where}.{key}", f"{value!r} is {_kind(value)}, not {wanted}", fix)
    if kind == "unexpected_keyword_argument":
        return ConfigError(f"{where}.{key}", f"unknown key {inner[0]!r}", f"give only {', '.join(keys)}; {fix}")
    if kind in ("missing_argument", "missing"):
        return ConfigError(f"{where}.{key}", f"{inner[0]!r} is missing", f"give {', '.join(keys)}; {fix}")
    wanted = {"key_columns": "a table of text values", "output_key_columns": "a list of column names"}.get(
        inner[0], "text")
    return ConfigError(f"{where}.{key}.{inner[0]}", f"{value!r} is {_kind(value)}, not {wanted}", fix)


def _check_checkpoint(spec: JobSpec, where: str) -> None:
    if spec.checkpoint is None:
        return
    if not spec.checkpoint.strip() or not is_location(spec.checkpoint):
        raise ConfigError(f"{where}.checkpoint", f"{spec.checkpoint!r} is not an absolute path or a URL",
                          "write an absolute path or a URL (e.g. s3://bucket/checkpoints/job), or remove it "
                          "to use $STATEOPS_HOME/checkpoints/<job>")


def check_values(spec: JobSpec) -> None:
    """The value rules of a JobSpec whose types pydantic accepted (JobSpec runs them as it is made): each
    refusal a ConfigError naming the field. Its transformation (an import) is checked by the catalog after this
    (stateops.jobs.definition.transformation.check)."""
    if not _NAME.match(spec.name):
        raise ConfigError("name", f"{spec.name!r} is not a valid job name",
                          "use lower-case letters, digits and underscores, starting with a letter")
    where = f"jobs.{spec.name}"
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
    if spec.state_store is not None and spec.state_store not in STORES:
        raise ConfigError(f"{where}.state_store", f"unknown state store {spec.state_store!r}",
                          f"use one of {sorted(STORES)}: rocksdb for state that may outgrow executor memory, memory "
                          "(Spark's default store) for state that fits")
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
    _check_input_paths(spec, where)
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
    if spec.archive_dir is not None and not (is_location(spec.archive_dir) and can_lock(spec.archive_dir)):
        raise ConfigError(f"{where}.archive_dir", f"{spec.archive_dir!r} is not an absolute path or a URL the "
                          "runbook's journal can lock (file locks on local or POSIX shared storage, or S3's "
                          "conditional writes)", "use an absolute path or an s3:// URL under the home's roots, or "
                          "remove it to use $STATEOPS_HOME/ops/<job>/archives")
    if not (_NAME.match(spec.sink_table or "") or is_location(spec.sink_table)):
        raise ConfigError(f"{where}.sink_table", f"{spec.sink_table!r} is not a valid table name, absolute path "
                          "or URL", "use lower-case letters, digits and underscores (a table under the home), or "
                          "an existing Delta table's absolute path or URL")
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


_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _check_input_paths(spec: JobSpec, where: str) -> None:
    """An input's `path`: a landing folder's absolute path or URL (json), a topic name (Kafka)."""
    for inp in spec.inputs:
        if inp.path is None:
            continue
        if spec.source == "kafka" and not _TOPIC.match(inp.path):
            raise ConfigError(f"{where}.inputs.{inp.name}.path", f"{inp.path!r} is not a Kafka topic name",
                              "name the topic the input reads (letters, digits, '.', '_', '-'), or remove it to "
                              f"read the topic {inp.name!r}")
        if spec.source == "json" and not is_location(inp.path):
            raise ConfigError(f"{where}.inputs.{inp.name}.path", f"{inp.path!r} is not an absolute path or a URL",
                              "name the landing folder the input reads (e.g. s3://bucket/landing/events), or "
                              "remove it to read $STATEOPS_HOME/landing/<input>")


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
        if inp is None or column not in inp.columns():
            raise ConfigError(f"{where}.explain.key_columns", f"{name} = {column!r} is not a column of an input",
                              "map each input to its column holding the key, e.g. { events = \"user_id\" }")
    if not all(_IDENTIFIER.match(c) for c in explain.output_key_columns):
        raise ConfigError(f"{where}.explain.output_key_columns", f"{list(explain.output_key_columns)!r} is not a "
                          "list of column names", 'list the output columns holding the key, e.g. ["user_id"]')
    _seconds(f"{where}.explain.late_margin", explain.late_margin)


_EMAIL = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,7}$")
_TAG_KEY = re.compile(r"^([A-Za-z0-9_.-]{1,63}/)?[A-Za-z0-9_.-]{1,63}$")
_TAG_VALUE = re.compile(r"^[A-Za-z0-9_.-]{0,63}$")
_GROUP = re.compile(r"^[A-Za-z0-9_]{1,63}$")
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


# What a `[jobs.<name>]` table must hold to define a job (otherwise it overrides a job defined elsewhere).
DEFINING = ("transformation", "inputs", "output_mode", "watermark_delay", "watermark_min", "watermark_max")
_DEFINITION_ONLY = {"name", "inputs", "transformation", "join"}


def spec_from_config(name: str, table: Any) -> JobSpec:
    """A job defined by a `[jobs.<name>]` table of the config file (`transformation = "module:function"`,
    inputs, watermark, output mode, ...): the table is the JobSpec's fields, checked as every definition is."""
    where = f"jobs.{name}"
    if not isinstance(table, dict):
        raise ConfigError(where, f"{table!r} is {_kind(table)}, not a table", f"write [jobs.{name}] and its settings")
    missing = [key for key in DEFINING if key not in table]
    if missing and not set(table) - {f.name for f in fields(JobSpec)}:
        raise ConfigError(f"{where}.{missing[0]}", "is required to define a job", f"set {', '.join(missing)} "
                          "(README.md, Your own jobs); to override a job defined elsewhere, use its name")
    return JobSpec(**{"name": name, "sink_table": name, **table})


def resolved(spec: JobSpec, env: Mapping[str, str] | None = None) -> JobSpec:
    """`spec` with every `${env:NAME}` reference in its strings resolved (stateops.references), checked again as
    every definition is: what a run, an audit or a runbook uses. The catalog keeps the references (what `jobs
    describe` and the Dagster definitions show); `spec` itself when it holds none."""
    values = asdict(spec)
    if not holds_reference(values):
        return spec
    return JobSpec(**resolve(values, f"jobs.{spec.name}", env))


def with_overrides(spec: JobSpec, overrides: Mapping[str, Any]) -> JobSpec:
    """Apply config-file overrides to a job defined elsewhere; unknown keys are errors, not silently ignored."""
    known = {f.name for f in fields(JobSpec)} - _DEFINITION_ONLY
    for key in overrides:
        if key not in known:
            raise ConfigError(f"jobs.{spec.name}.{key}", "is not a setting that can be overridden",
                              f"use one of {sorted(known)}")
    try:
        changed = replace(spec, **overrides)
    except ConfigError:
        _check_narrowing(spec, overrides)  # a widened bound is the first thing to say
        raise
    _check_narrowing(spec, overrides)
    return changed


def _check_narrowing(spec: JobSpec, overrides: Mapping[str, Any]) -> None:
    """A config file may narrow the built-in watermark bounds, never widen what it is checked against."""
    where, low, high = f"jobs.{spec.name}", spec.watermark_min, spec.watermark_max
    bounds = f"the built-in bounds [{low}, {high}]"
    for key in ("watermark_min", "watermark_max"):
        if not isinstance(overrides.get(key), str):
            continue  # absent, or of a type JobSpec refuses with its own words
        seconds = _seconds(f"{where}.{key}", overrides[key])
        if not _seconds(f"{where}.watermark_min", low) <= seconds <= _seconds(f"{where}.watermark_max", high):
            raise ConfigError(f"{where}.{key}", f"{overrides[key]!r} lies outside {bounds}",
                              f"a config file may only narrow the bounds: choose a value within [{low}, {high}]"
                              " (the bounds themselves belong to the job's definition)")
