"""One filesystem layer (fsspec) for every path, so the same code serves local disk, HDFS or object stores.

Object stores are configured by URL plus environment, the same for both clients: fsspec's s3fs (botocore)
and delta-rs read the standard AWS_* variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, AWS_REGION). `storage_options(uri)` hands them to delta-rs explicitly (plus
AWS_ALLOW_HTTP for an http:// endpoint, e.g. a test server on loopback), merged with
STATEOPS_STORAGE_OPTIONS, a JSON object of further delta-rs options that wins over the environment.
"""
from __future__ import annotations

import json
import os
from typing import Any

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from stateops.environment import text
from stateops.errors import ConfigError

S3_SCHEMES = ("s3", "s3a")
_AWS_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION")


# No listing cache for object stores: Spark (S3A), delta-rs and other processes write the same prefixes, and
# s3fs answered `info`/`open` of a file from a listing cached before that file was written (FileNotFoundError
# for a checkpoint's new commits/N in a runbook's archive step on S3; measured). Every listing asks the store.
fsspec.config.conf.setdefault("s3", {}).setdefault("use_listings_cache", False)

_LOCAL = LocalFileSystem()  # fsspec caches instances: url_to_fs hands out this same one for local paths


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem that serves `path` and the path as that filesystem names it. A plain local path takes
    the answer url_to_fs would give without parsing it as a URL chain (a sensor tick resolves tens of paths
    per job: at 1,000 jobs the parsing was a third of a tick)."""
    if "://" not in path and "::" not in path:
        return _LOCAL, _LOCAL._strip_protocol(path)
    return url_to_fs(path)


def exists(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.exists(p)


def find_files(fs: fsspec.AbstractFileSystem, base: str) -> dict[str, dict[str, Any]]:
    """Every file under `base` (as `filesystem` names it) with its info (`size`, `mtime`, `type`), as
    `fs.find(base, detail=True, withdirs=False)` gives it. On local disk: one scandir walk that reads each
    entry's stat once, where fsspec's local `find` calls `info()` (two stats and path handling) per entry,
    about 5x slower; a sensor tick lists the state of every job's checkpoint."""
    if not isinstance(fs, LocalFileSystem):
        return fs.find(base, detail=True, withdirs=False)
    found: dict[str, dict[str, Any]] = {}
    pending = [base.rstrip("/") or "/"]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.is_dir():
                pending.append(entry.path)
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:  # removed while listed (a temp file renamed): as if listed before
                continue
            found[entry.path] = {"name": entry.path, "size": stat.st_size, "type": "file", "mtime": stat.st_mtime}
    return found


def scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def extra_storage_options() -> dict[str, str]:
    raw = text("STATEOPS_STORAGE_OPTIONS") or ""
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except ValueError as err:
        raise ConfigError("STATEOPS_STORAGE_OPTIONS", f"is not JSON ({err})",
                          'write a JSON object of delta-rs storage options, e.g. {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}') from None
    if not isinstance(options, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
        raise ConfigError("STATEOPS_STORAGE_OPTIONS", "is not an object of text values",
                          'write e.g. {"AWS_REGION": "eu-west-1"} (every value in quotes)')
    return options


def storage_options(uri: str) -> dict[str, str] | None:
    """delta-rs storage options for `uri`: from the environment (S3: AWS_*), then STATEOPS_STORAGE_OPTIONS."""
    options: dict[str, str] = {}
    if scheme(uri) in S3_SCHEMES:
        options = {name: os.environ[name] for name in _AWS_ENV if os.environ.get(name)}
        if "AWS_REGION" not in options and os.environ.get("AWS_DEFAULT_REGION"):
            options["AWS_REGION"] = os.environ["AWS_DEFAULT_REGION"]
        if options.get("AWS_ENDPOINT_URL", "").startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    options.update(extra_storage_options())
    return options or None
