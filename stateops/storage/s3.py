"""The storage layer on S3 (s3:// and s3a://, one bucket either way), through s3fs: the same client, settings
and credentials as every other path of the home (stateops.storage.paths, stateops.storage.aws).

S3 has neither flock nor rename nor append, but it has conditional writes: a PUT with `If-None-Match: *`
creates an object only while none exists (of concurrent creators exactly one wins), and `If-Match: <ETag>`
writes or deletes only the version one read. Everything here is built on them:
  lock     take: create the lock object with If-None-Match; its body is the holder's record plus a random
           token (no two holders' versions share an ETag). Busy: try again after a short jittered pause until
           the caller's wait runs out. Crash: a dead holder's lock is taken over once older than the lock's
           ttl, judged by the server's clock alone (LastModified against the Date header of the same answer;
           no host's clock plays a part), by a PUT with If-Match on the stale ETag, so of several takers one
           wins. Hold: renewal is a PUT with If-Match on the holder's own ETag, every ttl / 4 by a heartbeat
           thread for a long-lived holder, or before each write for a short critical section; a refused
           renewal means the lock was taken over (`lost`), and the holder writes nothing more. Release: DELETE
           with If-Match on the holder's own ETag, so it never removes a lock another holder took over.
  probe    a server that ignored the conditions would let two holders in, so the first lock or record a process
           uses in a bucket first checks that the server honours them (AWS S3, MinIO and moto do) and refuses
           the storage otherwise.
  records  whole objects, replaced by a PUT (atomic for readers), created with If-None-Match; a record's
           version is its ETag.
  entries  one object per entry, `<name>/<seq:08d>.json`, created with If-None-Match, so an entry is never
           overwritten: a second writer fails on its next entry instead of interleaving. Read in name order.
"""
from __future__ import annotations

import json
import logging
import os
import posixpath
import random
import threading
import time
import uuid
from email.utils import parsedate_to_datetime
from typing import Any, NamedTuple

from fsspec.asyn import sync

from stateops.storage.failures import StorageFailure, failure, is_failure
from stateops.storage.holders import gone
from stateops.storage.locks import Lock, LockBusy, LockLost, UnsupportedStorageError, describe
from stateops.storage.paths import filesystem
from stateops.storage.records import EntryLog, Records, parse_record, render_record

log = logging.getLogger(__name__)

RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS = 0.01, 0.25  # the pause before trying a busy lock again: doubling, jittered
_REFUSED = ("PreconditionFailed", "ConditionalRequestConflict")  # a conditional write the server did not apply
_HONOURING: set[tuple[str | None, str]] = set()  # (endpoint, bucket) seen to honour conditional writes
_HONOURING_GUARD = threading.Lock()


def refused(err: BaseException) -> bool:
    """The server did not apply a conditional write: its condition failed (412), or another conditional write
    to the key was in flight (409, AWS). s3fs turns the ClientError into an OSError and keeps it as the cause."""
    response = getattr(err.__cause__, "response", None) or getattr(err, "response", None) or {}
    return response.get("Error", {}).get("Code") in _REFUSED


HTTP_DATE_RESOLUTION = 1.0  # seconds: Date and Last-Modified are whole seconds


def server_age(answer: dict[str, Any]) -> float:
    """How long ago, at least, the object of a HEAD or GET `answer` was last written, by the server's clock alone:
    its Date minus the object's LastModified, less one second, because both are whole seconds (a lock written at
    10.9 s and read at 11.1 s reads 1 s old after 0.2 s). So a lock is never taken over before it is `ttl` old."""
    now = parsedate_to_datetime(answer["ResponseMetadata"]["HTTPHeaders"]["date"])
    return max(0.0, (now - answer["LastModified"]).total_seconds() - HTTP_DATE_RESOLUTION)


class _Object:
    """One key of a bucket, with the calls the layer makes on it. Each returns the server's answer, or None when
    the server did nothing: a refused condition, or no such object."""

    def __init__(self, url: str):
        guarded, path = filesystem(url)
        self.fs = guarded.raw  # its calls are this class's: failures turned to one line here, refusals to None
        self.bucket, self.key, _ = self.fs.split_path(path)
        self.url = f"s3://{self.bucket}/{self.key}"

    def call(self, operation: str, **kwargs: Any) -> dict[str, Any] | None:
        async def run() -> dict[str, Any]:
            answer = await self.fs._call_s3(operation, Bucket=self.bucket, Key=self.key, **kwargs)
            if "Body" in answer and hasattr(answer["Body"], "read"):
                async with answer["Body"] as body:
                    answer["Body"] = await body.read()
            return answer
        try:
            return sync(self.fs.loop, run)
        except FileNotFoundError:
            return None
        except Exception as err:  # s3fs keeps botocore's connection errors as they are
            if refused(err):
                return None
            if is_failure(err):
                raise failure(self.url, operation, err) from None
            raise

    def honours_conditions(self) -> None:
        """Refuse a server that ignores If-None-Match or If-Match, once per process, endpoint and bucket: a probe
        object next to this one, created twice, then overwritten and deleted with a wrong ETag; each of the
        last three must be refused."""
        server = (os.environ.get("AWS_ENDPOINT_URL"), self.bucket)
        with _HONOURING_GUARD:
            if server in _HONOURING:
                return
        probe = _Object(f"s3://{self.bucket}/{posixpath.dirname(self.key)}/.probe-{uuid.uuid4().hex}")
        probe.call("put_object", Body=b"", IfNoneMatch="*")
        try:
            honoured = (probe.call("put_object", Body=b"", IfNoneMatch="*") is None
                        and probe.call("put_object", Body=b"", IfMatch='"0"') is None
                        and probe.call("delete_object", IfMatch='"0"') is None)
        finally:
            probe.call("delete_object")
        if not honoured:
            raise UnsupportedStorageError(
                f"{self.url}: the S3 server ignores conditional writes (If-None-Match, If-Match), so locks and "
                "records would not be exclusive. Fix: use a server that honours them (AWS S3, MinIO), or set "
                "STATEOPS_CONTROL_HOME to a local or POSIX shared path")
        with _HONOURING_GUARD:
            _HONOURING.add(server)


class _Found(NamedTuple):
    etag: str
    holder: dict[str, Any]
    age: float  # seconds, by the server's clock


class ObjectLock(Lock):
    def __init__(self, url: str, ttl: float, heartbeat: bool, name: str):
        super().__init__(url, ttl, heartbeat, name)
        self.object = _Object(url)
        self.url = self.object.url
        self.etag: str | None = None
        self._body = b""

    def _found(self) -> _Found | None:
        answer = self.object.call("get_object")
        if answer is None:
            return None
        try:
            holder = json.loads(answer["Body"])
        except ValueError:
            holder = None
        return _Found(answer["ETag"], holder if isinstance(holder, dict) else {}, server_age(answer))

    def _take(self, record: dict[str, Any], deadline: float) -> None:
        self.object.honours_conditions()
        token = uuid.uuid4().hex
        body = json.dumps({**record, "token": token}).encode()
        pause = RETRY_FIRST_SECONDS
        while True:
            created = self.object.call("put_object", Body=body, IfNoneMatch="*")
            if created is not None:
                return self._hold(created["ETag"], body)
            found = self._found()
            if found is not None:
                if found.holder.get("token") == token:  # created, but the answer was lost and the SDK's retry refused
                    return self._hold(found.etag, body)
                if found.age >= self.ttl or gone(found.holder):  # free: the one rule, live() is its negation
                    taken = self.object.call("put_object", Body=body, IfMatch=found.etag)
                    if taken is not None:
                        why = ("its process on this host is gone" if found.age < self.ttl else
                               "its holder is presumed dead")
                        log.warning("took over the %s %s of %s, %.0f s old by the server's clock (%s)", self.name,
                                    self.url, describe(found.holder), found.age, why)
                        return self._hold(taken["ETag"], body)
                elif time.monotonic() >= deadline:
                    raise LockBusy(self.url, found.holder, found.age, self.ttl)
            time.sleep(pause * random.uniform(0.5, 1.5))
            pause = min(2 * pause, RETRY_MAX_SECONDS)

    def _hold(self, etag: str, body: bytes) -> None:
        self.etag, self._body = etag, body

    def renew(self) -> None:
        if self.lost is not None:
            raise LockLost(f"{self.url}: {self.lost}")
        if self.etag is None:
            return
        renewed = self.object.call("put_object", Body=self._body, IfMatch=self.etag)
        if renewed is None:
            self.lost = f"its lock {self.url} was taken over by another process (not renewed for {self.ttl:g} s)"
            raise LockLost(f"{self.url}: {self.lost}")
        self.etag = renewed["ETag"]

    def _give_up(self) -> None:
        etag, self.etag = self.etag, None
        if self.lost is not None or etag is None:
            return
        try:
            if self.object.call("delete_object", IfMatch=etag) is None:
                log.info("the %s %s was taken over while held; left to its new holder", self.name, self.url)
        except StorageFailure as err:
            log.warning("the %s %s was not released (%s); it is taken over once %g s old", self.name, self.url, err,
                        self.ttl)

    def holder(self) -> dict[str, Any]:
        found = self._found()
        return found.holder if found else {}

    def _busy(self) -> LockBusy:
        found = self._found()
        return LockBusy(self.url, found.holder if found else {}, found.age if found else 0.0, self.ttl)

    def live(self) -> bool:
        found = self._found()
        return found is not None and found.age < self.ttl and not gone(found.holder)


class ObjectRecords(Records):
    def __init__(self, folder: str):
        self.folder = folder.rstrip("/")
        self._checked = False

    def _object(self, name: str) -> _Object:
        found = _Object(self.where(name))
        if not self._checked:
            found.honours_conditions()
            self._checked = True
        return found

    def where(self, name: str) -> str:
        return f"{self.folder}/{name}.json"

    def read_versioned(self, name: str) -> tuple[dict[str, Any] | None, str | None]:
        answer = _Object(self.where(name)).call("get_object")
        if answer is None:
            return None, None
        return parse_record(self.where(name), answer["Body"]), answer["ETag"]

    def write(self, name: str, record: dict[str, Any]) -> None:
        _Object(self.where(name)).call("put_object", Body=render_record(record).encode(),
                                       ContentType="application/json")

    def write_if(self, name: str, record: dict[str, Any], version: str | None) -> bool:
        condition = {"IfMatch": version} if version is not None else {"IfNoneMatch": "*"}
        return self._object(name).call("put_object", Body=render_record(record).encode(),
                                       ContentType="application/json", **condition) is not None

    def create(self, name: str, record: dict[str, Any]) -> bool:
        return self._object(name).call("put_object", Body=render_record(record).encode(),
                                       ContentType="application/json", IfNoneMatch="*") is not None

    def remove(self, name: str) -> None:
        _Object(self.where(name)).call("delete_object")


class ObjectEntryLog(EntryLog):
    """`<directory>/<name>/<seq:08d>.json`, one object per entry."""

    def __init__(self, directory: str, name: str):
        self.folder = posixpath.join(directory.rstrip("/"), name)

    def read(self) -> list[dict[str, Any]]:
        fs, base = filesystem(self.folder)
        fs.invalidate_cache(base)  # another process writes them: list the bucket, not this process's cache
        names = sorted(fs.find(base)) if fs.exists(base) else []
        bodies = fs.cat(names) if names else {}
        return [json.loads(bodies[name]) for name in names]

    def append(self, seq: int, entry: str) -> bool:
        target = _Object(posixpath.join(self.folder, f"{seq:08d}.json"))
        written = target.call("put_object", Body=entry.encode(), IfNoneMatch="*") is not None
        target.fs.invalidate_cache(posixpath.dirname(f"{target.bucket}/{target.key}"))
        return written
