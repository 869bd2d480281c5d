"""The roots guard: every path a destructive step (archive, delete, rewrite) touches goes through
`Roots.confine(path, job=...)` first, and the step acts on the path it returns.

A path is refused when it is relative, contains `..`, resolves (following every symlink) outside the
configured roots, is the home itself, lies inside or contains the landing zones (input: no step of StateOps
ever changes it), or lies inside or contains another job's area: its checkpoint, its dead-letter checkpoint,
its ops directory, its configured archive folder, its sink table, its dead-letter table. Roots are
STATEOPS_HOME plus any job checkpoint or archive folder configured outside it. Object-store URLs cannot hold symlinks: they are normalized as text and held to the same rules.
"""
from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Iterable, Mapping

from stateops.errors import StateOpsError
from stateops.layout import Layout
from stateops.storage import is_url


class OutsideRootsError(StateOpsError):
    """A destructive step was about to touch a path it must not."""


def _resolve(path: str) -> str:
    if path.startswith("file://"):
        path = path[len("file://"):]
    if is_url(path):
        scheme, rest = path.split("://", 1)
        return f"{scheme}://{posixpath.normpath(rest)}"
    return os.path.realpath(path)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True)
class Roots:
    home: str                                   # resolved
    roots: tuple[str, ...]                      # resolved: home, plus checkpoints outside it
    areas: Mapping[str, tuple[str, ...]]        # job -> resolved paths only that job's steps may touch
    untouchable: tuple[str, ...] = ()           # resolved paths no step may touch (the landing zones)

    @classmethod
    def from_layout(cls, layout: Layout, checkpoints: Mapping[str, str],
                    archives: Mapping[str, str] | None = None,
                    sink_tables: Mapping[str, str] | None = None, landings: Iterable[str] = ()) -> "Roots":
        """`checkpoints`: every configured job -> its checkpoint path (a job may keep it outside the home);
        `archives`: jobs whose archive folder is configured -> that folder (anywhere, like a checkpoint);
        `sink_tables`: job -> its output table's path (an adopted job's may lie outside the home);
        `landings`: input folders outside the home's landing zone (an adopted job's), as untouchable as it."""
        home = _resolve(layout.home)
        areas = {job: tuple(_resolve(p) for p in (
            checkpoint, layout.deadletter_checkpoint(job), layout.ops_dir(job), layout.deadletter_table(job),
            *((archives[job],) if job in (archives or {}) else ()),
            *((sink_tables[job],) if job in (sink_tables or {}) else ())))
            for job, checkpoint in checkpoints.items()}
        configured = ([areas[job][0] for job in areas] + [_resolve(p) for p in (archives or {}).values()]
                      + [_resolve(p) for p in (sink_tables or {}).values()])
        outside = tuple(sorted({p for p in configured if not _within(p, home)}))
        landing = {_resolve(layout.landing(""))} | {_resolve(p) for p in landings}
        return cls(home=home, roots=(home, *outside), areas=areas, untouchable=tuple(sorted(landing)))

    def confine(self, path: str, *, job: str | None) -> str:
        """The resolved path, if a destructive step of `job` may touch it; else OutsideRootsError.
        job=None: a step that belongs to no job (retention of ops tables and orphans) may touch no job's area."""
        def refuse(problem: str, fix: str) -> OutsideRootsError:
            return OutsideRootsError(f"refusing {path} for {f'job {job}' if job else 'a step of no job'}: "
                                     f"{problem}. Fix: {fix}")

        if job is not None and job not in self.areas:
            raise refuse("unknown job", f"use one of {sorted(self.areas)}")
        if ".." in path.replace("\\", "/").split("/"):
            raise refuse("the path contains '..'", "pass the path without '..' components")
        if not is_url(path) and not os.path.isabs(path):  # file:// URLs are absolute
            raise refuse("the path is relative", "pass an absolute path")
        real = _resolve(path)
        if not any(_within(real, root) for root in self.roots):
            shown = f" (resolves to {real})" if real != path.rstrip("/") else ""
            raise refuse(f"outside the roots{shown} {list(self.roots)}",
                         "only paths under STATEOPS_HOME or a job's configured checkpoint may be touched")
        if real == self.home:
            raise refuse("it is the StateOps home itself", "name the job's own checkpoint, archive or file")
        for area in self.untouchable:
            if _within(real, area) or _within(area, real):
                raise refuse(f"it resolves to {real}, which touches the landing zones {area}",
                             "input is never deleted or rewritten by StateOps; name a checkpoint, archive or table")
        for other, owned in self.areas.items():
            if other == job:
                continue
            for area in owned:
                if _within(real, area) or _within(area, real):
                    raise refuse(f"it resolves to {real}, which touches {other}'s {area}",
                                 f"a step of {job} may only touch {job}'s own paths" if job else
                                 "only paths no configured job owns may be touched here")
        return real
