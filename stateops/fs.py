"""One filesystem layer (fsspec) for every path, so the same code serves local disk, HDFS or object stores."""
from __future__ import annotations

import fsspec
from fsspec.core import url_to_fs


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem that serves `path` and the path as that filesystem names it."""
    return url_to_fs(path)



def exists(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.exists(p)
