"""One record interface for every backend: small JSON documents in a folder (the control records), and an
append-only log of entries (a runbook's journal).

Records are replaced whole, so a reader without any lock sees the old record or the new one, never a mix;
`create` writes only while no record of that name exists (of racing creators exactly one wins);
`read_versioned` gives the record with a version that changes at every write; `write_if` replaces it only while it
is still at the version read (None: still absent). On S3 that condition is the server's (If-Match on the ETag,
If-None-Match), so a writer that read, paused and resumed after another's write is refused whatever the timing; on
local disk it is checked just before the rename, which refuses a write made after another's but not one racing it
(a writer frozen between the check and the rename): what relies on it there also orders its records itself (the
lease's epochs). A corrupt record is refused naming where it is, the same on every backend.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from stateops.errors import StateOpsError


def parse_record(where: str, text: str | bytes) -> dict[str, Any]:
    """A record's JSON; a corrupt one is refused naming `where` it is."""
    try:
        return json.loads(text)
    except ValueError as err:
        raise StateOpsError(f"{where}: not a valid control record ({err}). Fix: inspect it; delete it only if "
                            "no run or runbook of the job is active") from None


def render_record(record: dict[str, Any]) -> str:
    """A record as every backend stores it."""
    return json.dumps(record, indent=1, sort_keys=True)


class Records(ABC):
    """The records of one folder, `<folder>/<name>.json`."""

    @abstractmethod
    def where(self, name: str) -> str:
        """The record's path or URL (for messages)."""

    @abstractmethod
    def read_versioned(self, name: str) -> tuple[dict[str, Any] | None, str | None]:
        """(the record, its version), (None, None) when there is none."""

    def read(self, name: str) -> dict[str, Any] | None:
        return self.read_versioned(name)[0]

    @abstractmethod
    def write(self, name: str, record: dict[str, Any]) -> None:
        """Replace the record whole."""

    @abstractmethod
    def write_if(self, name: str, record: dict[str, Any], version: str | None) -> bool:
        """Replace the record only while it is at `version` (None: only while there is none); False, writing
        nothing, when it changed since (see the module doc for what each backend proves)."""

    @abstractmethod
    def create(self, name: str, record: dict[str, Any]) -> bool:
        """Write the record only if none of that name exists; False when one does (nothing written)."""

    @abstractmethod
    def remove(self, name: str) -> None:
        """Remove the record (gone already: nothing to do)."""


class EntryLog(ABC):
    """An append-only log of JSON entries named `name` in `directory`, read back in order."""

    @abstractmethod
    def read(self) -> list[dict[str, Any]]:
        """Every entry, oldest first."""

    @abstractmethod
    def append(self, seq: int, entry: str) -> bool:
        """Append `entry` (a JSON object as text) as entry number `seq` (0-based); False, writing nothing, when
        the log already holds an entry `seq` (another writer was first)."""
