"""One filesystem layer (fsspec) for every path, local or remote, plus the roots guard."""
from __future__ import annotations

import posixpath
from typing import Iterable

import fsspec
from fsspec.core import url_to_fs

from stateops.errors import OutsideRootsError


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem that serves `path` and the path as that filesystem names it."""
    return url_to_fs(path)


def _normalized(path: str) -> str:
    fs, p = filesystem(path)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return f"{protocol}://{posixpath.normpath(p)}"


def ensure_within(path: str, roots: Iterable[str]) -> str:
    """Return `path` if it lies inside one of `roots`; refuse anything else (no `..` escapes)."""
    target = _normalized(path)
    for root in roots:
        base = _normalized(root)
        if target == base or target.startswith(base.rstrip("/") + "/"):
            return path
    raise OutsideRootsError(
        f"refusing to touch {path!r}: it is outside the configured roots {list(roots)}; "
        "set STATEOPS_HOME to the tree you mean to manage"
    )


def exists(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.exists(p)
