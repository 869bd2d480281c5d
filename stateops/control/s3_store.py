"""A job's control records in an S3 bucket (a control home at s3:// or s3a://, one and the same bucket).

S3 has neither flock nor rename, but it has conditional writes: a PUT with `If-None-Match: *` creates an
object only while none exists (of concurrent creators exactly one wins), and `If-Match: <ETag>` writes or
deletes only the version one read. The job's control lock is built on them:
  take     create `ops/<job>/control/.lock` with If-None-Match; its body names the holder (host, pid, thread,
           a random token). The others retry after a short jittered pause, for up to LOCK_WAIT_SECONDS.
  crash    a dead holder's lock stays behind: it is taken over once older than LOCK_TTL_SECONDS, the age judged
           by the server's clock alone (LastModified against the Date header of the same answer; no host's
           clock plays a part), by a PUT with If-Match on the stale ETag, so of several takers one wins.
  hold     before each write or removal the holder renews its lock (PUT If-Match on its own ETag): a holder
           paused past the TTL and taken over learns it there and writes nothing (ControlStorageError).
  release  DELETE with If-Match on the holder's own ETag: never removes a lock that another holder took over.
Records are whole objects, `ops/<job>/control/<name>.json` in the local backend's JSON: a PUT is atomic for
readers, who get the old record or the new one, never a mix.

A server that ignored the conditions would let two holders in, so the first lock a process takes in a bucket
first checks that the server honours them (AWS S3, MinIO and moto do) and refuses the storage otherwise.

Configuration is the AWS SDK's own environment, read by boto3: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION. A custom endpoint is addressed
path-style (http://host/bucket/key), which S3-compatible servers serve without per-bucket DNS names.
"""
from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from stateops.errors import OperationFailed, StateOpsError, first_line
from stateops.layout import Layout
from stateops.s3_lock_object import server_age

from stateops.control.process import HOST
from stateops.control.records import now_iso
from stateops.control.store import (ControlStore, UnsupportedStorageError, parse_record, render_record,
                                    thread_lock)

log = logging.getLogger(__name__)

LOCK_TTL_SECONDS = 30.0   # critical sections take milliseconds: a lock this old (server clock) has a dead holder
LOCK_WAIT_SECONDS = 60.0  # more than the TTL, so a waiter outlasts a dead holder's lock and takes it over
RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS = 0.01, 0.25  # the pause before trying a busy lock again: doubling, jittered

# A failed condition (412), a concurrent conditional write to the key in flight (409, AWS), the object gone (404):
# the call did nothing, and the caller decides what that means.
_NOT_DONE = ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey")
_CLIENT_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
               "AWS_DEFAULT_REGION")
_CLIENTS: dict[tuple[str | None, ...], Any] = {}
_CLIENTS_GUARD = threading.Lock()
_HONOURING: set[tuple[str | None, str]] = set()  # (endpoint, bucket) seen to honour conditional writes


class ControlStorageError(OperationFailed, OSError):
    """The control records in the bucket could not be read or written (server, network, credentials), or this
    holder's lock was taken over while it held it. An OSError, as a local disk's failure would be, so that a
    heartbeat keeps trying (holder.HeldLease._beat) and a run's fence decides."""


def client() -> Any:
    """The process's S3 client for the AWS_* environment in force (a client takes tens of milliseconds to
    build, and a sensor tick reads the records of every job; boto3 clients are thread-safe)."""
    env = tuple(os.environ.get(name) for name in _CLIENT_ENV)
    with _CLIENTS_GUARD:
        if env not in _CLIENTS:
            config = Config(s3={"addressing_style": "path"}) if os.environ.get("AWS_ENDPOINT_URL") else None
            _CLIENTS[env] = boto3.session.Session().client("s3", region_name=os.environ.get("AWS_REGION") or None,
                                                           config=config)
        return _CLIENTS[env]


@dataclass
class _Held:
    """The lock object as this holder last wrote it."""

    etag: str
    body: bytes


@dataclass(frozen=True)
class _Found:
    """The lock object as read: its version, its holder, and its age by the server's clock."""

    etag: str
    holder: dict[str, Any]
    age: float

    def describe(self) -> str:
        holder = self.holder
        return (f"pid {holder.get('pid')} (thread {holder.get('thread')}) on {holder.get('host')}, "
                f"token {holder.get('token')}")


class S3ControlStore(ControlStore):
    """Records as objects under `<control home>/ops/<job>/control/`, changed under the lock object."""

    def __init__(self, layout: Layout, job: str):
        self.job = job
        url = urlparse(Layout(layout.control_home).ops_dir(job))
        self.bucket, self.prefix = url.netloc, url.path.strip("/") + "/control/"
        self.lock_key = self.prefix + ".lock"
        self._held: _Held | None = None

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}.json"

    def _call(self, operation: str, key: str, **kwargs) -> dict[str, Any] | None:
        """The client's `operation` on `key`; None when the server did nothing (_NOT_DONE); any other failure
        is a ControlStorageError naming the object and the settings to check. A GET's body is read here."""
        try:
            answer = getattr(client(), operation)(Bucket=self.bucket, Key=key, **kwargs)
            if "Body" in answer:
                answer["Body"] = answer["Body"].read()
            return answer
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in _NOT_DONE:
                return None
            failure = err
        except BotoCoreError as err:
            failure = err
        raise ControlStorageError(
            f"{self.url(key)}: {operation} failed ({first_line(failure)}). Fix: check the bucket exists and the "
            "S3 settings (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION)") from None

    def read(self, name: str) -> dict[str, Any] | None:
        answer = self._call("get_object", self.key(name))
        return None if answer is None else parse_record(self.url(self.key(name)), answer["Body"])

    def write(self, name: str, record: dict[str, Any]) -> None:
        self._renew()
        self._call("put_object", self.key(name), Body=render_record(record).encode(), ContentType="application/json")

    def remove(self, name: str) -> None:
        self._renew()
        self._call("delete_object", self.key(name))

    @contextmanager
    def critical(self) -> Iterator[None]:
        with thread_lock(self.url(self.lock_key)):
            self._held = self._take()
            try:
                yield
            finally:
                held, self._held = self._held, None
                self._release(held)

    def _take(self) -> _Held:
        self._check_conditional_writes()
        token = uuid.uuid4().hex
        body = render_record({"host": HOST, "pid": os.getpid(), "thread": threading.current_thread().name,
                              "token": token, "since": now_iso()}).encode()
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        pause = RETRY_FIRST_SECONDS
        while True:
            created = self._call("put_object", self.lock_key, Body=body, IfNoneMatch="*")
            if created is not None:
                return _Held(created["ETag"], body)
            found = self._find_lock()
            if found is not None:
                if found.holder.get("token") == token:  # created, but the answer was lost and the SDK's retry refused
                    return _Held(found.etag, body)
                if found.age > LOCK_TTL_SECONDS:
                    taken = self._call("put_object", self.lock_key, Body=body, IfMatch=found.etag)
                    if taken is not None:
                        log.warning("%s: took over the control lock %s of %s, %.0f s old by the server's clock "
                                    "(its holder is presumed dead)", self.job, self.url(self.lock_key),
                                    found.describe(), found.age)
                        return _Held(taken["ETag"], body)
                elif time.monotonic() >= deadline:
                    raise StateOpsError(
                        f"{self.job}: the control lock {self.url(self.lock_key)} is held by {found.describe()}, "
                        f"{found.age:.0f} s old by the server's clock; waited {LOCK_WAIT_SECONDS:g} s. Fix: retry; "
                        f"a lock whose holder died is taken over once {LOCK_TTL_SECONDS:g} s old, so this holder "
                        "is alive and slow: check that process")
            time.sleep(pause * random.uniform(0.5, 1.5))
            pause = min(2 * pause, RETRY_MAX_SECONDS)

    def _find_lock(self) -> _Found | None:
        """The lock object, None when there is none; its age is the server's Date minus its LastModified."""
        answer = self._call("get_object", self.lock_key)
        if answer is None:
            return None
        try:
            holder = json.loads(answer["Body"])
        except ValueError:
            holder = None
        return _Found(answer["ETag"], holder if isinstance(holder, dict) else {}, server_age(answer))

    def _renew(self) -> None:
        """Before a write under the lock: confirm this holder still holds it and restart its TTL, so a holder
        paused past the TTL and taken over writes nothing."""
        held = self._held
        if held is None:  # a write without the lock (none in stateops): nothing to confirm
            return
        renewed = self._call("put_object", self.lock_key, Body=held.body, IfMatch=held.etag)
        if renewed is None:
            raise ControlStorageError(
                f"{self.job}: the control lock {self.url(self.lock_key)} was taken over while this process held "
                f"it (paused longer than {LOCK_TTL_SECONDS:g} s); nothing was written. Fix: retry the command; "
                "check the host for long pauses (swap, a stopped VM)")
        held.etag = renewed["ETag"]

    def _release(self, held: _Held) -> None:
        """Delete the lock if it is still this holder's. A failure is logged, not raised: it must not hide
        the outcome of the critical section, and the lock is taken over after the TTL anyway."""
        try:
            if self._call("delete_object", self.lock_key, IfMatch=held.etag) is None:
                log.warning("%s: the control lock %s was taken over while held; left to its new holder", self.job,
                            self.url(self.lock_key))
        except ControlStorageError as err:
            log.warning("%s: the control lock was not released (%s); it is taken over after %g s", self.job, err,
                        LOCK_TTL_SECONDS)

    def _check_conditional_writes(self) -> None:
        """Refuse a server that ignores If-None-Match or If-Match (it would let two holders in): once per process
        and bucket, on a probe object next to the lock, created twice, then overwritten and deleted with a
        wrong ETag; each of the last three must be refused."""
        server = (os.environ.get("AWS_ENDPOINT_URL"), self.bucket)
        if server in _HONOURING:
            return
        probe = f"{self.prefix}.probe-{uuid.uuid4().hex}"
        self._call("put_object", probe, Body=b"", IfNoneMatch="*")
        try:
            honoured = (self._call("put_object", probe, Body=b"", IfNoneMatch="*") is None
                        and self._call("put_object", probe, Body=b"", IfMatch='"0"') is None
                        and self._call("delete_object", probe, IfMatch='"0"') is None)
        finally:
            self._call("delete_object", probe)
        if not honoured:
            raise UnsupportedStorageError(
                f"{self.url(self.prefix)}: the S3 server ignores conditional writes (If-None-Match, If-Match), so "
                "the control lock would not be exclusive. Fix: use a server that honours them (AWS S3, MinIO), or "
                "set STATEOPS_CONTROL_HOME to a local or POSIX shared path")
        _HONOURING.add(server)
