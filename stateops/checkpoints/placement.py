"""A job's checkpoint and landing folders where its config puts them now, against where its checkpoint says they were:
checked before every run, so that moving one of them by hand or by config is refused in one line naming the move
command, instead of Spark's `Wrong basePath` or a silent re-read of every input file into the table.

- Landing moved (a changed landing path, a home copied with `cp -a`): the file source's log names each file it read by
  its absolute URL; files under another folder than the job's landing now mean the input moved without the log.
- Checkpoint moved (a changed `checkpoint` setting, nothing copied there): a new checkpoint reads all input again,
  and its query's new id writes it into the table a second time; refused while the table holds output, unless a
  runbook starts the run (a rebuild makes a new checkpoint on purpose, with its own replay rules).
"""
from __future__ import annotations

from deltalake.exceptions import DeltaError

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.source_log import logged_paths, spark_form
from stateops.delta import open_table
from stateops.errors import StateOpsError
from stateops.storage import exists, read_text

MOVE = "stateops home move --to URL"


class Misplaced(StateOpsError):
    """A job's checkpoint or landing is not where its checkpoint recorded it: nothing was run (exit code 2)."""


def recorded_folders(checkpoint: str) -> set[str]:
    """The folders the checkpoint's file sources read their newest files from (as Spark names them)."""
    folders = set()
    for index in Checkpoint(checkpoint).logged_sources():
        newest = Checkpoint(checkpoint).newest_source_log(index)
        if newest is not None:
            folders.update(path.rsplit("/", 1)[0] for path in logged_paths(read_text(newest)))
    return folders


def check_placement(job: str, checkpoints: list[str], landings: list[str], table: str, by_runbook: bool) -> None:
    """Refuse (Misplaced) a run whose checkpoints record input folders other than `landings`, or, outside a
    runbook, whose stateful checkpoint (`checkpoints[0]`) is missing while its `table` holds output."""
    expected = {spark_form(landing) for landing in landings}
    for checkpoint in checkpoints:
        if not exists(checkpoint):
            continue
        moved = sorted(recorded_folders(checkpoint) - expected)
        if moved:
            raise Misplaced(
                f"job {job}: its checkpoint {checkpoint} read its input from {moved[0]}, but its landing is now "
                f"{', '.join(sorted(landings))}: input moved without its checkpoint's log would fail (Wrong basePath) "
                f"or be read again; nothing was run. Fix: move the whole home with `{MOVE}` (it rewrites the log), "
                "or put the landing back")
    if by_runbook or exists(checkpoints[0]):
        return
    try:
        table_found = open_table(table)
    except (OSError, DeltaError):
        return  # a table that cannot be read is the sink's failure to report in the run, not a misplacement
    if table_found is not None and table_found.count() > 0:
        raise Misplaced(
            f"job {job}: no checkpoint at {checkpoints[0]}, but its table {table} holds the output of an earlier one: "
            "a new checkpoint would read all input again into it; nothing was run. Fix: if the checkpoint moved, point "
            f"`checkpoint` at it (a whole home moves with `{MOVE}`); to start the job over, remove {table} too")
