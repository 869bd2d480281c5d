"""What StateOps hands Dagster, redacted (stateops.redaction): the run's event log and its metadata are stored in
the instance and shown in the UI. A StateOps error ends a Dagster step as its first line, with no retry (a retry
would meet the same configuration, lease or lock)."""
from __future__ import annotations

import contextlib
import traceback
from typing import Any, Iterator, Mapping

from dagster import Failure, MetadataValue

from stateops.errors import StateOpsError, first_line
from stateops.redaction import redact, redact_fd, redact_tree

from stateops.jobs.runtime.failures import QueryFailed

# The metadata values that carry text, rebuilt from their redacted value.
_TEXTS = (MetadataValue.text, MetadataValue.md, MetadataValue.json, MetadataValue.path, MetadataValue.url)
_TEXT_TYPES = tuple(type(make("")) for make in _TEXTS)


def one_line_failure(err: StateOpsError | QueryFailed) -> Failure:
    return Failure(description=redact(first_line(err)), allow_retries=False)


@contextlib.contextmanager
def redacted_step() -> Iterator[None]:
    """The body of a StateOps step. What it prints (PySpark's logs, the JVM's console, any library) reaches
    Dagster's compute logs redacted: the process's stdout and stderr, which Dagster captures around the steps,
    go through stateops.redaction.redact_fd while it runs. And it ends the way the CLI ends a command: a StateOps
    error or a failed query as its one line; any other error as its first line with its trace in the failure's
    metadata; all redacted, and without the chain of causes, which Dagster would store in the event log whole
    (Spark's own text may quote a resolved secret)."""
    undo = [redact_fd(fd) for fd in (1, 2)]
    try:
        yield
    except (StateOpsError, QueryFailed) as err:
        raise one_line_failure(err) from None
    except Exception as err:  # noqa: BLE001 - re-raised as a Failure, trace kept (redacted)
        raise Failure(description=redact(first_line(err)), allow_retries=False,
                      metadata={"trace": MetadataValue.text(redact(traceback.format_exc()))}) from None
    finally:
        for restore in reversed(undo):
            restore()


def redacted(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """`metadata` for a materialization, observation, output or failure, every text in it redacted."""
    return {key: type(value)(redact_tree(value.value)) if isinstance(value, _TEXT_TYPES) else
            value if isinstance(value, MetadataValue) else redact_tree(value) for key, value in metadata.items()}
