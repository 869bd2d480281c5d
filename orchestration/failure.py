"""What StateOps hands Dagster, redacted (stateops.redaction): the run's event log and its metadata are stored in
the instance and shown in the UI. A StateOps error ends a Dagster step as its first line, with no retry (a retry
would meet the same configuration, lease or lock)."""
from __future__ import annotations

from typing import Any, Mapping

from dagster import Failure, MetadataValue

from stateops.errors import StateOpsError, first_line
from stateops.redaction import redact, redact_tree

# The metadata values that carry text, rebuilt from their redacted value.
_TEXTS = (MetadataValue.text, MetadataValue.md, MetadataValue.json, MetadataValue.path, MetadataValue.url)
_TEXT_TYPES = tuple(type(make("")) for make in _TEXTS)


def one_line_failure(err: StateOpsError) -> Failure:
    return Failure(description=redact(first_line(err)), allow_retries=False)


def redacted(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """`metadata` for a materialization, observation, output or failure, every text in it redacted."""
    return {key: type(value)(redact_tree(value.value)) if isinstance(value, _TEXT_TYPES) else
            value if isinstance(value, MetadataValue) else redact_tree(value) for key, value in metadata.items()}
