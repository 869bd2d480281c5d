"""A lock held as one object in an S3 bucket for as long as an operation runs (a runbook, a retention run), kept
alive by a heartbeat, because its holder may die without a word and nothing releases the object for it.

S3 has no flock, but it has conditional writes: a PUT with `If-None-Match: *` creates an object only while none
exists (of concurrent creators exactly one wins), and `If-Match: <ETag>` writes or deletes only the version one
read. The lock is built on them:
  take     create the object with If-None-Match; its body is the holder's record plus a random token, so that no
           two holders' versions share an ETag (S3's ETag of a small object is the MD5 of its body).
  live     a heartbeat thread renews it (PUT If-Match on its own ETag) every ttl / 4. A lock is live while it is
           younger than ttl by the server's clock (server_age: no host's clock plays a part).
  crash    a dead holder's lock goes stale; the next taker replaces it with If-Match on the stale ETag, so of
           two takers one wins.
  lost     a renewal refused means another process took the lock over (this holder was silent for the ttl):
           `lost` says so, and the holder must act no further under it.
  release  DELETE with If-Match on the holder's own ETag: never removes a lock that another holder took over.
The calls go through s3fs (the filesystem stateops.fs gives for the URL, with its settings), whose errors are
OSErrors keeping the server's answer as their cause.
"""
from __future__ import annotations

import json
import threading
import uuid
from email.utils import parsedate_to_datetime
from typing import Any, Callable, NamedTuple

from stateops.fs import filesystem

_NOT_DONE = ("PreconditionFailed", "ConditionalRequestConflict")  # a conditional write the server refused


def server_age(answer: dict[str, Any]) -> float:
    """Seconds since the object of a HEAD or GET `answer` was last written, by the server's clock alone: its
    LastModified against the Date header of the same answer (hosts' clocks may disagree with each other)."""
    now = parsedate_to_datetime(answer["ResponseMetadata"]["HTTPHeaders"]["date"])
    return (now - answer["LastModified"]).total_seconds()


def refused(err: Exception) -> bool:
    """The server did not apply a conditional write: its condition failed (412), or another conditional write
    to the key was in flight (409, AWS). s3fs turns the ClientError into an OSError and keeps it as the cause."""
    response = getattr(err.__cause__, "response", None) or getattr(err, "response", None) or {}
    return response.get("Error", {}).get("Code") in _NOT_DONE


class Found(NamedTuple):
    """The lock object as a HEAD saw it."""

    etag: str
    age: float  # seconds, by the server's clock


class S3LockObject:
    """The lock object at `url` (s3:// or s3a://), stale once `ttl` seconds old (see the module doc)."""

    def __init__(self, url: str, ttl: float):
        self.ttl = ttl
        self.fs, path = filesystem(url)
        self.bucket, self.key, _ = self.fs.split_path(path)
        self.url = f"s3://{self.bucket}/{self.key}"
        self.etag: str | None = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def _put(self, body: bytes, **condition: str) -> str:
        return self.fs.call_s3("put_object", Bucket=self.bucket, Key=self.key, Body=body, **condition)["ETag"]

    def found(self) -> Found | None:
        """The lock object's ETag and age, None when there is none."""
        try:
            answer = self.fs.call_s3("head_object", Bucket=self.bucket, Key=self.key)
        except FileNotFoundError:
            return None
        return Found(answer["ETag"], server_age(answer))

    def live(self) -> bool:
        """Some process holds the lock now: it is there and younger than the ttl."""
        found = self.found()
        return found is not None and found.age < self.ttl

    def holder(self) -> dict[str, Any]:
        """The record its holder wrote, {} when the lock is gone or its body is not a record (for messages)."""
        try:
            record = json.loads(self.fs.cat_file(f"{self.bucket}/{self.key}"))
        except (FileNotFoundError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def acquire(self, record: dict[str, Any], busy: Callable[[], Exception]) -> None:
        """Create the lock holding `record`, or take over a stale one, and start the heartbeat; raises busy()
        while a live process holds it."""
        body = json.dumps({**record, "token": uuid.uuid4().hex}).encode()
        try:
            self.etag = self._put(body, IfNoneMatch="*")
        except OSError as err:
            if not refused(err):
                raise
            found = self.found()
            if found is not None and found.age < self.ttl:
                raise busy() from None
            try:  # stale (its holder died) or removed meanwhile: take it over, one taker wins
                self.etag = self._put(body, **({"IfMatch": found.etag} if found else {"IfNoneMatch": "*"}))
            except OSError as again:
                if refused(again):
                    raise busy() from None
                raise
        self._beat = threading.Thread(target=self._renew, args=(body,), name=f"lock-object {self.key}", daemon=True)
        self._beat.start()

    def _renew(self, body: bytes) -> None:
        while not self._stop.wait(self.ttl / 4):
            try:
                self.etag = self._put(body, IfMatch=self.etag)
            except OSError as err:
                if refused(err):
                    self.lost = (f"its lock {self.url} was taken over by another process "
                                 f"(not renewed for {self.ttl:g} s)")
                    return
                # the server or the network failed this once: the next beat tries again, within the ttl

    def release(self) -> None:
        """Stop the heartbeat and delete the lock if it is still this holder's."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        if self.lost is None and self.etag is not None:
            try:
                self.fs.call_s3("delete_object", Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
            except FileNotFoundError:
                pass
            except OSError as err:
                if not refused(err):
                    raise
