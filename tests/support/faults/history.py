"""The bucket's versions as the history of every write: the oracle of "each commit point was written once".

With versioning on, S3 keeps every object ever written under a key, so an overwrite, which would otherwise leave
no trace (the second writer's bytes simply replace the first's), shows as a second version. Spark's checkpoint
(`offsets/N`, `commits/N`, the checkpoint's `metadata`, a file source's log `sources/<id>/N[.compact]`) and Delta's log
(`_delta_log/<20 digits>.json`) are only correct if each of those keys is created exactly once; any with more than
one version is a lost or rewritten commit (tests/support/faults/proxy.py's log then says which writer sent each).

Order: S3 lists the versions of a key newest first; this module returns them oldest first. It keeps the listing's
order, not LastModified's, which moto gives to the second. The client is a plain boto3 client pointed at the
store directly, never through a fault proxy.
"""
from __future__ import annotations

import re
from typing import NamedTuple

# Commit points by kind: the write-once keys of a Spark checkpoint and of a Delta table. `metadata` is the
# checkpoint's own (the query id), not a state operator's `state/<op>/_metadata/metadata`.
COMMIT_POINTS = {
    "offsets": re.compile(r"(?:^|/)offsets/\d+$"),
    "commits": re.compile(r"(?:^|/)commits/\d+$"),
    "metadata": re.compile(r"(?:^|/)(?<!_metadata/)metadata$"),
    "sources": re.compile(r"(?:^|/)sources/\d+/\d+(?:\.compact)?$"),
    "delta-log": re.compile(r"(?:^|/)_delta_log/\d{20}\.json$"),
}


class Version(NamedTuple):
    """One object version of a key."""

    version_id: str
    last_modified: object  # datetime (timezone-aware), as botocore parses it
    size: int
    etag: str


def enable_versioning(s3_client, bucket: str) -> None:
    """Turn versioning on (before the run: writes made earlier keep a single `null` version)."""
    s3_client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    status = s3_client.get_bucket_versioning(Bucket=bucket).get("Status")
    if status != "Enabled":
        raise RuntimeError(f"versioning of {bucket} is {status!r}, not Enabled: the write history would be lost")


def versions(s3_client, bucket: str, prefix: str = "") -> dict[str, list[Version]]:
    """{key: [Version(version_id, last_modified, size, etag), ...] oldest first} of every key under `prefix`
    (delete markers are not versions: Spark purges old `offsets/` and `commits/` files, S3A's rename deletes its
    source)."""
    found: dict[str, list[Version]] = {}
    for page in s3_client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Versions", []):
            found.setdefault(item["Key"], []).append(
                Version(item["VersionId"], item["LastModified"], item["Size"], item["ETag"].strip('"')))
    return {key: listed[::-1] for key, listed in found.items()}


def commit_point_kind(key: str) -> str | None:
    """'offsets', 'commits', 'metadata', 'sources' or 'delta-log' for a commit-point key, else None."""
    return next((kind for kind, pattern in COMMIT_POINTS.items() if pattern.search(key)), None)


def commit_points(history: dict[str, list[Version]], kinds=tuple(COMMIT_POINTS)) -> dict[str, list[Version]]:
    """The commit-point keys of a `versions()` history (of the given kinds)."""
    return {key: found for key, found in history.items() if commit_point_kind(key) in kinds}


def rewritten_commit_points(history: dict[str, list[Version]], kinds=tuple(COMMIT_POINTS)) -> dict[str, list[Version]]:
    """The commit points written more than once: each is a violation of create-once (a lost or replaced commit
    when the versions differ, a duplicate write when they are equal: compare the etags)."""
    return {key: found for key, found in commit_points(history, kinds).items() if len(found) > 1}
