"""A plan to apply is a request, not an authority: each of its items is admitted only as the planner makes it now.

A saved plan (`stateops retention apply --plan FILE`) may be old, or edited by hand: an `orphan_checkpoint`
item pointed at a job's output table once deleted that table. So at apply time the executor plans again
(fresh inventory, policies, leases and maintenance locks) and acts on an item of the saved plan only when the
fresh plan has the same rule and action on the same target for the same job, and then on the fresh item's
data, narrowed to what the saved item asked for:

- files to delete: those the saved item lists that the fresh item lists too, at the same size;
- a tree to delete or archive: only if it is the size, file count and age the saved plan saw (else it changed
  since the plan was reviewed); into the archive folder the saved plan named, if it lies where the planner
  puts such archives; the protected archive is the fresh plan's;
- rows to drop or roll up: before the earlier of the two cutoffs, on the fresh plan's column;
- table maintenance (vacuum, log cleanup, compaction): as the fresh plan has it.

Items run in the fresh plan's order (vacuum before the rewrites; see tables.py), each at most once. Nothing is
deleted that the plan command would not plan now; a refused item says why in one line.
"""
from __future__ import annotations

import posixpath
from dataclasses import replace
from datetime import datetime

from stateops.errors import StateOpsError
from stateops.retention.model import (ARCHIVE_TREE, DELETE_FILES, DELETE_TREE, DROP_ROWS, ROLLUP_ROWS, Item,
                                      Plan)

# What the saved plan saw of a tree and must still hold (an orphan's archive id carries the planning time).
_TREE_FACTS = {DELETE_TREE: ("bytes", "files", "last_modified", "archive_id"),
               ARCHIVE_TREE: ("bytes_moved", "files_moved", "last_modified")}


class NotPlanned(StateOpsError):
    """The planner would not make this item now (one line: why)."""


def _key(item: Item) -> tuple[str, str, str | None, str]:
    return item.rule, item.action, item.job, item.target.rstrip("/")


class Admission:
    """Matches the items of a plan to apply against `current`, the plan the planner makes now."""

    def __init__(self, current: Plan):
        self.current = current
        self._by_key = {_key(item): (index, item) for index, item in enumerate(current.items)}
        self._seen: set[tuple[str, str, str | None, str]] = set()

    def order(self, items: tuple[Item, ...]) -> list[Item]:
        """`items` in the order the current plan would run them (unknown items last, in their own order)."""
        last = len(self.current.items)
        return sorted(items, key=lambda item: self._by_key.get(_key(item), (last, None))[0])

    def _why_not(self, item: Item) -> str:
        target = item.target.rstrip("/")
        planned = sorted({f"{i.rule}/{i.action}" for i in self.current.items if i.target.rstrip("/") == target})
        skipped = [s["reason"] for s in self.current.skipped if s["target"].rstrip("/") == target]
        what = f"{item.rule}/{item.action} of {target}"
        if skipped:  # the planner's own reason for leaving the target alone (a held lease, maintenance, ...)
            return f"the plan command would not plan {what} now: {skipped[0]}"
        if planned:
            return f"the plan command plans {', '.join(planned)} for {target} now, not {item.rule}/{item.action}" \
                   f"{f' for job {item.job}' if item.job else ''}"
        return (f"the plan command would not plan {what} now: no rule of the current policy selects it "
                f"(it is not a checkpoint, archive or table retention looks after, or it is still needed)")

    def admit(self, item: Item) -> Item:
        """The item to act on, as the planner makes it now and narrowed to `item`; NotPlanned otherwise."""
        key = _key(item)
        if key not in self._by_key:
            raise NotPlanned(f"{self._why_not(item)}. Fix: review `stateops retention plan` and apply that")
        if key in self._seen:
            raise NotPlanned(f"{item.rule}/{item.action} of {item.target} appears more than once in the plan; "
                             "it runs once")
        self._seen.add(key)
        fresh = self._by_key[key][1]
        if item.action == DELETE_FILES:
            asked = dict(item.paths)
            paths = tuple((rel, size) for rel, size in fresh.paths if asked.get(rel) == size)
            if not paths:
                raise NotPlanned(f"none of the {len(asked)} file(s) this item lists under {item.target} would be "
                                 "planned now (needed again, changed or gone)")
            return replace(fresh, item_id=item.item_id, paths=paths, bytes=sum(s for _, s in paths), files=len(paths))
        if item.action in (DELETE_TREE, ARCHIVE_TREE):
            def fact(of: Item, name: str):
                return getattr(of, name) if name in ("bytes", "files") else of.details.get(name)

            changed = [name for name in _TREE_FACTS[item.action] if fact(item, name) != fact(fresh, name)]
            if changed:
                raise NotPlanned(f"{item.target} changed since the plan ({', '.join(changed)} differ from what the "
                                 "plan command finds now)")
            if item.action == ARCHIVE_TREE:  # the archive the plan named (its id carries the planning time)
                destination, archive_id = item.details.get("destination"), item.details.get("archive_id")
                if not isinstance(destination, str) or not isinstance(archive_id, str) or "/" in archive_id or \
                        archive_id in ("", ".", "..") or \
                        destination.rstrip("/") != posixpath.join(posixpath.dirname(fresh.details["destination"]),
                                                                  archive_id):
                    raise NotPlanned(f"{item.target}: destination {destination!r} is not an archive folder the plan "
                                     f"command would choose (under {posixpath.dirname(fresh.details['destination'])})")
                return replace(fresh, item_id=item.item_id,
                               details={**fresh.details, "destination": destination, "archive_id": archive_id})
            return replace(fresh, item_id=item.item_id)
        if item.action in (DROP_ROWS, ROLLUP_ROWS):
            try:
                asked = datetime.fromisoformat(item.details["cutoff"])
            except (KeyError, TypeError, ValueError):
                asked = None
            if asked is None or asked.tzinfo is None:
                raise NotPlanned(f"{item.target}: the item has no valid cutoff (an ISO time with its offset)")
            cutoff = min(asked, datetime.fromisoformat(fresh.details["cutoff"]))
            return replace(fresh, item_id=item.item_id, details={**fresh.details, "cutoff": cutoff.isoformat()})
        return replace(fresh, item_id=item.item_id)
