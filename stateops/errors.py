"""Errors a user can act on: the CLI prints them as one line, without a traceback."""


class StateOpsError(Exception):
    """Base for errors that carry a complete, user-facing message. `exit_code` is what the CLI exits with:
    2 for usage, configuration and refusals (nothing was done), 1 for an operation that failed while acting
    (subclasses say so)."""

    exit_code = 2


class OperationFailed(StateOpsError):
    """An operation started and failed (exit code 1): a lost lease, an unreadable store or ops table, an archive
    that does not verify, a runbook step."""

    exit_code = 1


class ConfigError(StateOpsError):
    """A configuration value is wrong: names the field, the problem and the fix."""

    def __init__(self, field: str, problem: str, fix: str):
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{field}: {problem}. Fix: {fix}")



def first_line(err: BaseException) -> str:
    """The first line of an error's message (Spark and Py4J messages run to pages), or its class name when it
    has none: how every one-line report (CLI, journal, tick reason, Dagster failure) quotes an error."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def error_line(err: BaseException) -> str:
    """How a journal and a report quote a failure: the first line of the message, after the error's class name
    unless it is a StateOpsError (whose message is complete)."""
    if isinstance(err, StateOpsError) or not str(err).strip():
        return first_line(err)
    return f"{type(err).__name__}: {first_line(err)}"
