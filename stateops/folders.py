"""Where each job's folders may lie, checked when the catalog loads: a checkpoint belongs to one query (never
shared, never a filesystem root or bucket, never around the home, never inside or around inputs, tables or ops),
and a configured archive folder stays clear of every job's checkpoints and of all but its own job's ops folder.
The destructive steps' guard, applied to every path they touch, is its neighbour stateops.roots."""
from __future__ import annotations

import posixpath
import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Callable, Iterable

from stateops.errors import ConfigError
from stateops.layout import Layout

_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


@dataclass(frozen=True)
class JobFolders:
    """What of a job lies on storage: its inputs' landing folders (name, path), its sink table (as configured:
    a name or a path) and the table's path, its checkpoint (resolved under the home) and its configured archive
    folder (None: the default under ops/)."""

    name: str
    landings: tuple[tuple[str, str], ...]
    sink_table: str
    sink_path: str
    checkpoint: str
    archive_dir: str | None = None


def _norm(path: str) -> str:
    return path.rstrip("/") if _URL.match(path) else posixpath.normpath(path)


def _inside(a: str, b: str) -> bool:
    """`a` is `b` or lies under it (a filesystem root `/` holds every absolute path)."""
    a, b = _norm(a), _norm(b)
    return a == b or a.startswith(b.rstrip("/") + "/")


def _is_root(path: str) -> bool:
    """A filesystem root or a bucket (`/`, `s3://bucket`): no job's folder, and the roots guard would admit
    everything under it."""
    if _URL.match(path):
        return "/" not in path.split("://", 1)[1].strip("/")
    return not _norm(path).strip("/")


def _check_own_folder(job: JobFolders, key: str, path: str, layout: Layout) -> None:
    if _is_root(path):
        raise ConfigError(f"jobs.{job.name}.{key}", f"{path!r} is a filesystem root or a bucket",
                          f"give the job a {key} folder of its own, e.g. {path.rstrip('/')}/stateops/{job.name}")
    if _inside(layout.home, path):
        raise ConfigError(f"jobs.{job.name}.{key}", f"{path!r} contains the StateOps home {layout.home!r}",
                          f"give the job a {key} folder of its own, outside the home or under it")


class _Folders:
    """Named folders, each normalized once, that answer "which of you overlaps this path?" without comparing
    every pair: a path lies inside a folder whose key (normalized, trailing '/' stripped) is the path itself
    or the path up to one of its '/'s (one lookup per level), and the folders inside a path are one run of the
    sorted keys (those starting with the path and a '/'). The same answers as `_inside` both ways against each folder,
    at O(depth + log n) a path instead of O(n): a catalog of 1,000 jobs made check_paths half a million pairs."""

    def __init__(self, named: Iterable[tuple[str, str]]):
        self.names: list[str] = []
        self._by_key: dict[str, list[int]] = {}
        keyed: list[tuple[str, int]] = []
        for i, (what, path) in enumerate(named):
            key = _norm(path).rstrip("/")
            self.names.append(what)
            self._by_key.setdefault(key, []).append(i)
            keyed.append((key, i))
        keyed.sort()
        self._keys = [key for key, _ in keyed]
        self._order = [i for _, i in keyed]

    def overlapping(self, path: str) -> set[int]:
        """Positions of the folders `path` overlaps (is one of, lies inside, or holds)."""
        norm = _norm(path)
        outer = {norm.rstrip("/")} | {norm[:i] for i, ch in enumerate(norm) if ch == "/"}
        found = {i for key in outer for i in self._by_key.get(key, ())}
        prefix = norm.rstrip("/") + "/"
        at = bisect_left(self._keys, prefix)
        while at < len(self._keys) and self._keys[at].startswith(prefix):
            found.add(self._order[at])
            at += 1
        return found

    def first(self, path: str, admit: Callable[[int], bool] = lambda i: True) -> str | None:
        """The name of the first folder (in the order given) that `path` overlaps and `admit` admits."""
        found = [i for i in self.overlapping(path) if admit(i)]
        return self.names[min(found)] if found else None


def check_folders(jobs: Iterable[JobFolders], layout: Layout) -> None:
    """A checkpoint belongs to one query: never shared, never a filesystem root, never around the home, never
    inside (or around) inputs, tables or ops. A configured archive folder likewise stays clear of every job's
    checkpoints and of everything but its own job's ops folder. Each refusal names the first clash in the
    order of the jobs (areas first, then checkpoints); the folders are indexed (_Folders), so the check
    grows with the number of jobs, not with its square."""
    jobs = list(jobs)
    named: list[tuple[str, str]] = [("the ops tables", layout.ops_table(""))]
    for job in jobs:
        named += [(f"the landing zone of {name}", path) for name, path in job.landings]
        named += [(f"the table {job.sink_table}", job.sink_path),
                  (f"the dead letters of {job.name}", layout.deadletter_table(job.name)),
                  (f"the dead-letter checkpoint of {job.name}", layout.deadletter_checkpoint(job.name)),
                  (f"the ops folder of {job.name}", layout.ops_dir(job.name))]
    others = _Folders(named)
    checkpoints = _Folders((f"the checkpoint of {job.name}", job.checkpoint) for job in jobs)
    for job in jobs:
        if job.archive_dir is not None:
            _check_own_folder(job, "archive_dir", job.archive_dir, layout)
            own = f"the ops folder of {job.name}"
            clash = others.first(job.archive_dir, lambda i: others.names[i] != own) or checkpoints.first(
                job.archive_dir)
            if clash:
                raise ConfigError(f"jobs.{job.name}.archive_dir", f"{job.archive_dir!r} overlaps {clash}",
                                  "give the job's archives a folder of their own (default: "
                                  "$STATEOPS_HOME/ops/<job>/archives)")
    for i, job in enumerate(jobs):
        path = job.checkpoint
        clash = others.first(path) or checkpoints.first(path, lambda j: j > i)
        if clash:
            raise ConfigError(f"jobs.{job.name}.checkpoint", f"{path!r} overlaps {clash}",
                              "give every job a checkpoint directory of its own, outside landing/, tables/ "
                              "and ops/ (default: $STATEOPS_HOME/checkpoints/<job>)")
        _check_own_folder(job, "checkpoint", path, layout)
