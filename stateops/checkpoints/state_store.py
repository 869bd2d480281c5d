"""Which state store and formats a job's checkpoint runs with, and which a new checkpoint gets, with the source of
each (no JVM: the offset log and the state files).

Spark pins a checkpoint's provider and join state format in its offset log (`OffsetSeqMetadata`'s relevant
confs): an existing checkpoint keeps both, whatever the session sets. It does not pin two others, which the
session's value would silently change on the next run: RocksDB's changelog checkpointing (a checkpoint of zip
snapshots only would start writing changelogs) and the checkpoint format (`checkpointFormatVersion`: version 2
names each state file `<version>_<unique id>` and keeps the ids in the commit log). Both are read here from the
state files, so the run can keep them (`run_conf`).

A new checkpoint (a new job, or a rebuild's) gets: the job's `state_store` where it names one; else the store and
formats of the checkpoint a rebuild replaced (kept by the runbook as the job's `state_formats` override); else the
session's (STATEOPS_SPARK_CONF, else StateOps' defaults: RocksDB with changelog checkpointing, join format 4,
checkpoint format 1). The in-memory store has no column families: a join there is in format 2 at most, and its
checkpoints are in format 1.
"""
from __future__ import annotations

import json
import posixpath
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.errors import ConfigError, StateOpsError

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
MEMORY = "memory"
ROCKSDB = "rocksdb"
STORES = {ROCKSDB: ROCKSDB_PROVIDER, MEMORY: HDFS_PROVIDER}
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
JOIN_FORMAT = "spark.sql.streaming.join.stateFormatVersion"
CHECKPOINT_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"
DEFAULTS = {PROVIDER: ROCKSDB_PROVIDER, CHANGELOG: "true", JOIN_FORMAT: "4", CHECKPOINT_FORMAT: "1"}
MEMORY_JOIN_FORMAT = 2  # the newest join format without column families
_UNIQUE_ID = re.compile(r"^\d+_[0-9a-f-]+\.(?:changelog|zip|delta|snapshot)$")


def store_name(provider: str | None) -> str:
    """"rocksdb", "memory", or the provider's class name (a store of its own)."""
    return next((name for name, cls in STORES.items() if cls == provider), provider or MEMORY)


@dataclass(frozen=True)
class Formats:
    """A checkpoint's state store and formats: `changelog` None where the store has none (the in-memory store)."""

    store: str
    changelog: bool | None
    join_format: int
    checkpoint_format: int

    def conf(self) -> dict[str, str]:
        """Spark's settings that give a new checkpoint these formats."""
        conf = {PROVIDER: STORES.get(self.store, self.store), JOIN_FORMAT: str(self.join_format),
                CHECKPOINT_FORMAT: str(self.checkpoint_format)}
        if self.changelog is not None:
            conf[CHANGELOG] = str(self.changelog).lower()
        return conf

    def text(self) -> str:
        changelog = "" if self.changelog is None else f" (changelog {'on' if self.changelog else 'off'})"
        return (f"{self.store}{changelog}, join format {self.join_format}, checkpoint format "
                f"{self.checkpoint_format}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Formats":
        return cls(**json.loads(text))

    def fitted(self) -> tuple["Formats", list[str]]:
        """These formats as the store can hold them, and what had to change: the in-memory store keeps no
        changelog, no join format above 2 and no checkpoint format 2."""
        if self.store != MEMORY:
            return self, []
        fitted = replace(self, changelog=None, join_format=min(self.join_format, MEMORY_JOIN_FORMAT),
                         checkpoint_format=1)
        changed = [f"join format {self.join_format} -> {fitted.join_format}"] if fitted.join_format != \
            self.join_format else []
        if self.checkpoint_format != 1:
            changed.append(f"checkpoint format {self.checkpoint_format} -> 1")
        return fitted, [f"{c} (the in-memory store has no column families)" for c in changed]


def of_checkpoint(path: str) -> tuple[Formats, int] | None:
    """The formats an existing checkpoint runs with, and the offset log batch they were read from; None for a
    checkpoint with no batch yet (or none at all)."""
    try:
        checkpoint = Checkpoint.open(path)
        batches = checkpoint.offset_batches()
    except (StateOpsError, OSError):
        return None
    if not batches:
        return None
    conf = checkpoint.batch_metadata(batches[-1]).get("conf", {})
    store = store_name(conf.get(PROVIDER, HDFS_PROVIDER))  # Spark's default, before it was recorded
    files = checkpoint.state_files()
    versioned = [f for f in files if f.version is not None]
    unique = any(_UNIQUE_ID.match(posixpath.basename(f.path)) for f in versioned)
    changelog: bool | None = None
    if store == ROCKSDB:
        # no state file yet (a stateless start): what the session will write
        changelog = any(f.kind == "changelog" for f in versioned) if versioned else None
    return Formats(store, changelog, int(conf.get(JOIN_FORMAT, 1)), 2 if unique else 1), batches[-1]


def _session(session_conf: Mapping[str, str], key: str) -> tuple[str, str]:
    if key in session_conf:
        return session_conf[key], "STATEOPS_SPARK_CONF"
    return DEFAULTS[key], "StateOps' default"


def for_new_checkpoint(asked: str | None, kept: Formats | None, session_conf: Mapping[str, str],
                       kept_source: str = "") -> tuple[Formats, dict[str, str], list[str]]:
    """The formats a new checkpoint gets: (formats, field -> source, notes on what the store could not hold).
    `asked`: the job's state_store; `kept`: the formats of the checkpoint a rebuild replaced; `session_conf`: the
    settings STATEOPS_SPARK_CONF gives the session."""
    if asked is not None and asked not in STORES:
        raise ConfigError("state_store", f"unknown state store {asked!r}", f"use one of {sorted(STORES)}")
    provider, provider_source = _session(session_conf, PROVIDER)
    changelog, changelog_source = _session(session_conf, CHANGELOG)
    join, join_source = _session(session_conf, JOIN_FORMAT)
    checkpoint_format, checkpoint_source = _session(session_conf, CHECKPOINT_FORMAT)
    formats = Formats(store_name(provider), changelog.lower() == "true", int(join), int(checkpoint_format))
    sources = {"store": provider_source, "changelog": changelog_source, "join_format": join_source,
               "checkpoint_format": checkpoint_source}
    if kept is not None:
        session_changelog = formats.changelog
        formats = kept
        sources = dict.fromkeys(sources, kept_source or "the checkpoint a rebuild replaced")
        if kept.changelog is None:  # kept from the in-memory store: RocksDB's changelog as the session has it
            formats, sources["changelog"] = replace(formats, changelog=session_changelog), changelog_source
    if asked is not None:
        formats = replace(formats, store=asked)
        sources["store"] = "the job's state_store"
    fitted, notes = formats.fitted()
    return fitted, sources, notes


def in_force(path: str, asked: str | None, kept: Formats | None, session_conf: Mapping[str, str],
             kept_source: str = "") -> dict[str, Any]:
    """`jobs describe`'s state store block: each of store, changelog, join format and checkpoint format with its
    value and source, and a note where the job's state_store differs from the checkpoint's."""
    existing = of_checkpoint(path)
    if existing is None:
        formats, sources, notes = for_new_checkpoint(asked, kept, session_conf, kept_source)
        block: dict[str, Any] = {name: {"value": value, "source": f"a new checkpoint's: {sources[name]}"}
                                 for name, value in asdict(formats).items()}
        block["notes"] = notes
        return block
    formats, batch = existing
    source = f"the checkpoint (offset log batch {batch})"
    files = "the checkpoint's state files"
    recorded = _recorded(formats, kept)
    if recorded != formats:
        formats, files = recorded, kept_source or "the runbook that switched its store"
    block = {"store": {"value": formats.store, "source": source},
             "changelog": {"value": formats.changelog, "source": files},
             "join_format": {"value": formats.join_format, "source": source},
             "checkpoint_format": {"value": formats.checkpoint_format, "source": files},
             "notes": []}
    if asked is not None and asked != formats.store:
        block["notes"].append(f"the job's state_store is {asked}: the checkpoint keeps {formats.store} (Spark pins "
                              f"it); a rebuild moves the job to {asked}")
    return block


def run_conf(path: str, asked: str | None, kept: Formats | None, session_conf: Mapping[str, str]) -> dict[str, str]:
    """The settings a job's stateful query starts with: a new checkpoint's formats; on an existing checkpoint the
    two Spark does not pin (changelog checkpointing, checkpoint format) as its files have them."""
    existing = of_checkpoint(path)
    if existing is None:
        return for_new_checkpoint(asked, kept, session_conf)[0].conf()
    formats = _recorded(existing[0], kept)
    conf = {CHECKPOINT_FORMAT: str(formats.checkpoint_format)}
    if formats.changelog is not None:
        conf[CHANGELOG] = str(formats.changelog).lower()
    return conf


def _recorded(formats: Formats, kept: Formats | None) -> Formats:
    """An existing checkpoint's formats, with RocksDB's changelog checkpointing as a runbook recorded it (`kept`)
    where the files show only snapshots: a store switch writes one snapshot per store and records the changelog
    setting the checkpoint goes on with."""
    if kept is not None and kept.store == formats.store == ROCKSDB and not formats.changelog and kept.changelog:
        return replace(formats, changelog=True)
    return formats


def after_switch(checkpoint: str, target: str, session_conf: Mapping[str, str]) -> Formats:
    """The formats a checkpoint runs with after the runbook's store switch to `target`: its join format kept, RocksDB's
    changelog checkpointing as the session has it (the switch writes one snapshot, which tells nothing)."""
    old = of_checkpoint(checkpoint)
    join = old[0].join_format if old else int(DEFAULTS[JOIN_FORMAT])
    changelog = None if target == MEMORY else for_new_checkpoint(None, None, session_conf)[0].changelog
    return Formats(target, changelog, join, 1)


def _asked(formats: Formats, conf: Mapping[str, str]) -> Formats:
    """`formats` with what `conf` (STATEOPS_SPARK_CONF) sets explicitly."""
    values: dict[str, Any] = {}
    if PROVIDER in conf:
        values["store"] = store_name(conf[PROVIDER])
    if CHANGELOG in conf:
        values["changelog"] = conf[CHANGELOG].strip().lower() == "true"
    if JOIN_FORMAT in conf:
        values["join_format"] = int(conf[JOIN_FORMAT])
    if CHECKPOINT_FORMAT in conf:
        values["checkpoint_format"] = int(conf[CHECKPOINT_FORMAT])
    return replace(formats, **values)


def after_rebuild(old_checkpoint: str, asked: str | None, session_conf: Mapping[str, str]) -> tuple[Formats, list[str]]:
    """The formats a rebuild's new checkpoint gets: the old checkpoint's, unless the job's state_store names another
    store or STATEOPS_SPARK_CONF (`session_conf`) sets a format; and the plan's notes saying which."""
    existing = of_checkpoint(old_checkpoint)
    if existing is None:
        formats, _sources, notes = for_new_checkpoint(asked, None, session_conf)
        return formats, [f"the new checkpoint: {formats.text()}", *notes]
    old = existing[0]
    if old.store == ROCKSDB and old.changelog is None:  # no state file yet: what the session writes
        old = replace(old, changelog=for_new_checkpoint(None, None, session_conf)[0].changelog)
    formats, _sources, notes = for_new_checkpoint(asked, _asked(old, session_conf), session_conf)
    if formats == old:
        return formats, [f"the new checkpoint keeps the old one's state store and formats: {old.text()}", *notes]
    why = [name for name, changed in (("the job's state_store", asked is not None and asked != old.store),
                                      ("STATEOPS_SPARK_CONF", _asked(old, session_conf) != old)) if changed]
    return formats, [f"the new checkpoint moves from {old.text()} to {formats.text()} ({' and '.join(why)})", *notes]
