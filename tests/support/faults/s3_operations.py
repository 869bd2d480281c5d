"""What an S3 request on the wire is, named from its method, path, query and headers alone: the key it touches
(`bucket/key`, path-style, as every StateOps client addresses a custom endpoint) and the S3 operation.

The fault proxy matches its faults on these names and writes them into its log, so a test says "hold the PUT to
`.../_delta_log/00000000000000000003.json`" and a failure message says "CopyObject onto offsets/3" rather than
showing raw URLs. Multipart uploads get a marker after the key (`#part-2`, `#complete-multipart`, ...): the parts of
a large upload are not writes of the key, its completion is, and a regex anchored with `$` on the plain key
therefore matches only single-request writes.
"""
from __future__ import annotations

import urllib.parse
from typing import Mapping

# The headers that make a write conditional (S3's only storage-side fence: put-if-absent / compare-and-swap).
CONDITION_HEADERS = ("If-None-Match", "If-Match")


def parse_query(query: str) -> dict[str, str]:
    """The query string as a dict (a bare `?uploads` becomes {"uploads": ""})."""
    return dict(urllib.parse.parse_qsl(query, keep_blank_values=True))


def object_key(path: str) -> str:
    """`bucket/key` of a path-style request path (percent-decoded, no leading slash); `bucket` for bucket calls."""
    return urllib.parse.unquote(path).lstrip("/")


def multipart_marker(method: str, query: Mapping[str, str]) -> str:
    """The suffix naming a multipart operation ('' for anything else)."""
    if "uploads" in query:
        return "#create-multipart" if method == "POST" else "#list-multipart"
    if "uploadId" in query:
        if "partNumber" in query:
            return f"#part-{query['partNumber']}"
        return {"POST": "#complete-multipart", "DELETE": "#abort-multipart", "GET": "#list-parts"}.get(method, "")
    return ""


def operation(method: str, key: str, query: Mapping[str, str], headers: Mapping[str, str]) -> str:
    """The S3 operation's name, as in the API reference (best effort; 'Other' when unknown)."""
    is_bucket = "/" not in key.rstrip("/")
    if "uploads" in query:
        return "CreateMultipartUpload" if method == "POST" else "ListMultipartUploads"
    if "uploadId" in query:
        if "partNumber" in query:
            return "UploadPartCopy" if "x-amz-copy-source" in headers else "UploadPart"
        return {"POST": "CompleteMultipartUpload", "DELETE": "AbortMultipartUpload", "GET": "ListParts"}.get(
            method, "Other")
    if method == "POST" and "delete" in query:
        return "DeleteObjects"
    if is_bucket:
        if method == "GET":
            if "versions" in query:
                return "ListObjectVersions"
            if "versioning" in query:
                return "GetBucketVersioning"
            if "location" in query:
                return "GetBucketLocation"
            return "ListObjectsV2" if query.get("list-type") == "2" else "ListObjects"
        if method == "PUT":
            return "PutBucketVersioning" if "versioning" in query else "CreateBucket"
        return {"HEAD": "HeadBucket", "DELETE": "DeleteBucket"}.get(method, "Other")
    if method == "PUT":
        return "CopyObject" if "x-amz-copy-source" in headers else "PutObject"
    return {"GET": "GetObject", "HEAD": "HeadObject", "DELETE": "DeleteObject"}.get(method, "Other")


def condition(headers: Mapping[str, str]) -> str | None:
    """`If-None-Match: *` / `If-Match: "etag"` when the request is conditional, else None."""
    found = [f"{name}: {headers[name]}" for name in CONDITION_HEADERS if name in headers]
    return ", ".join(found) or None


def framing(headers: Mapping[str, str]) -> tuple[str, ...]:
    """How the request body was framed on the wire: `100-continue`, `chunked` (HTTP), `aws-chunked` (the SDK's
    signed/trailer-checksum encoding inside the body). Recorded so a test can see which paths a client exercised."""
    found = []
    if headers.get("Expect", "").lower() == "100-continue":
        found.append("100-continue")
    if "chunked" in headers.get("Transfer-Encoding", "").lower():
        found.append("chunked")
    if "aws-chunked" in headers.get("Content-Encoding", "").lower():
        found.append("aws-chunked")
    return tuple(found)
