"""What an operator asks of the runbook: one model, from which `stateops recover` builds its options and the
Dagster op `state_recovery` its Launchpad config. Each field's description is the help text of both; where it
names another field it says `{field}`, and each front end puts in its own word for it (the CLI its flag, the
Launchpad the field's name).

The core's refusals of a request name fields the same way (`RequestRefused`): the CLI and Dagster each render
them in their words, so no table translates one front end's words into the other's.
"""
from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, Mapping, Optional

from pydantic import ConfigDict, Field, ValidationError, model_validator
from pydantic.dataclasses import dataclass

from stateops.errors import ConfigError, StateOpsError
from stateops.recovery.model import RecoveryRefused


def _about(description: str, flag: str | None, *, example: str = "", launchpad: bool = True) -> dict[str, Any]:
    """A field's description and how the front ends show it: the CLI's flag, an example value for fixes, whether
    the Launchpad asks for it."""
    return {"description": description, "json_schema_extra": {"flag": flag, "example": example,
                                                              "launchpad": launchpad}}


@dataclass(frozen=True, config=ConfigDict(strict=True))
class RecoveryRequest:
    """A runbook request (see the module doc). Values are taken as they are typed (no "3" for 3, no true for 1):
    a value of another type is refused naming its field."""

    job: str = Field(**_about("The streaming job to recover.", "JOB"))
    mode: str = Field(**_about(
        "adjust: same checkpoint, new {watermark_delay} (admits later rows from now on; cannot bring back rows "
        "already dropped). repartition: same checkpoint, {shuffle_partitions} state partitions, offline. "
        "rebuild: fresh checkpoint replaying the retained input (optional {watermark_delay}, "
        "{shuffle_partitions}). rewind: back to {to_batch}, replaying what follows. restore: put {archive_id} "
        "back. restart: same checkpoint and settings, a guarded restart (stop, archive, restart, verify) of a "
        "query that stalled. switch-store: same checkpoint, its state moved to the {to_store} store offline "
        "(rewritten at the same batch, no input replayed). migrate: same checkpoint, its state rewritten for the "
        "job's changed query (every change classified first; no input replayed; optional {transform}).", "--mode"))
    watermark_delay: Optional[str] = Field(None, **_about(
        'New watermark delay, e.g. "20 minutes", within the job\'s bounds: required for adjust, optional for '
        "rebuild, not allowed otherwise.", "--watermark", example='"20 minutes"'))
    shuffle_partitions: Optional[int] = Field(None, **_about(
        "State partitions: required for repartition, optional for rebuild (the new checkpoint's), not allowed "
        "otherwise.", "--partitions", example="8"))
    to_batch: Optional[int] = Field(None, **_about(
        "rewind only: the last committed batch kept; the batch after it runs again.", "--to-batch", example="N"))
    archive_id: Optional[str] = Field(None, **_about(
        "restore only: the archive to put back (stateops archives list JOB).", "--archive",
        example="ID (stateops archives list JOB)"))
    to_store: Optional[str] = Field(None, **_about(
        "switch-store only: the store the state moves to, rocksdb or memory (Spark's in-memory, HDFS-backed "
        "store).", "--to", example="rocksdb"))
    transform: Optional[str] = Field(None, **_about(
        "migrate only: module:function, your rule for state StateOps cannot derive: a Python function taking the old "
        "state (Spark's state reader's DataFrame: key, value, partition_id) and the operator (a dict of operator_id, "
        "operator_name, store) and returning the new state's key and value columns (or None: StateOps' own "
        "rewrite); its schema is checked against the new query's before anything is written.", "--transform",
        example="my_rules:new_state"))
    reason: str = Field("", **_about("Why: journaled, shown in the maintenance lock and the archive manifest.",
                                     "--reason"))
    confirm: Optional[str] = Field(None, **_about(
        "The job's name, to act; without it the runbook only shows the plan.", "--confirm"))
    dry_run: bool = Field(True, **_about(
        "true (default): plan only, nothing is changed; the plan is in the run's metadata. false (with "
        "{confirm}): stop, archive, adjust, restart, verify, roll back on failure.", "--dry-run"))
    actor: Optional[str] = Field(None, **_about("Who (default: user@host).", "--actor", launchpad=False))

    @model_validator(mode="wrap")
    @classmethod
    def _typed(cls, values: Any, handler: Any) -> Any:
        try:
            return handler(values)
        except ValidationError as err:
            first = err.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else "job"
            raise refuse_field(name, f"{first['input']!r} is not {_KINDS.get(first['type'], 'valid')}",
                               f"pass {{{name}}} {example(name) or 'of its type'}") from None

    def parameters(self) -> dict[str, Any]:
        """What the runbook does (not who asks or whether it acts): two requests with equal parameters are the
        same runbook, so running it again after a crash resumes it."""
        return {"job": self.job, "mode": self.mode, "watermark_delay": self.watermark_delay,
                "shuffle_partitions": self.shuffle_partitions, "to_batch": self.to_batch,
                "archive_id": self.archive_id, "to_store": self.to_store, "transform": self.transform}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def request_fields() -> dict[str, Any]:
    """Field name -> its pydantic FieldInfo (description, default, and `json_schema_extra`: flag, launchpad), in
    declaration order."""
    info = RecoveryRequest.__pydantic_fields__
    return {f.name: info[f.name] for f in fields(RecoveryRequest)}


_KINDS = {"int_type": "a whole number", "string_type": "text", "bool_type": "true or false",
          "missing_argument": "given"}


def example(name: str) -> str:
    """An example value of a field, for fixes ("" when it has none)."""
    return request_fields()[name].json_schema_extra["example"]


def cli_words() -> dict[str, str]:
    """How the CLI names each field: its flag (JOB for the argument)."""
    return {name: info.json_schema_extra["flag"] or name for name, info in request_fields().items()}


def launchpad_words() -> dict[str, str]:
    """How the Launchpad names each field: the field itself."""
    return {name: name for name in request_fields()}


def described(name: str, words: Mapping[str, str]) -> str:
    """A field's description with the fields it names in `words`."""
    return request_fields()[name].description.format_map(words)


def safe(value: Any) -> str:
    """A value quoted into a message template (braces kept as they are)."""
    return str(value).replace("{", "{{").replace("}", "}}")


class RequestRefused(RecoveryRefused):
    """A request the runbook will not act on, naming request fields as `{field}` (the module doc). str() says
    them by field name; `words(cli_words())` as the CLI does."""

    def __init__(self, template: str):
        self.template = template
        super().__init__(template.format_map(launchpad_words()))

    def words(self, names: Mapping[str, str]) -> str:
        return self.template.format_map(names)


class RequestFieldError(ConfigError, RequestRefused):
    """One field of the request is wrong or missing: a ConfigError naming the field (`field`), said by each front
    end in its words."""

    def __init__(self, name: str, problem: str, fix: str):
        self.field, self.problem, self.fix = name, problem, fix.format_map(launchpad_words())
        self.template = f"{{{name}}}: {safe(problem)}. Fix: {fix}"
        StateOpsError.__init__(self, f"{name}: {problem}. Fix: {self.fix}")  # ConfigError's message, said once


def refuse_field(name: str, problem: str, fix: str) -> RequestFieldError:
    """`<field>: <problem>. Fix: <fix>`: `problem` is plain text (values in it are quoted as they are), `fix` a
    template naming fields as `{field}`."""
    return RequestFieldError(name, problem, fix)

