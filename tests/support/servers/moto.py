"""moto's S3 server on loopback, in its own process, for the object-store tests and benchmarks.

Its own process (this file run as a script: moto's server with the fixes of `serve`), not moto's
ThreadedMotoServer: some delta-rs calls (e.g. `alter.set_table_properties`) hold the GIL while they wait
for the HTTP answer, so a server thread in the same interpreter can never answer them and the call hangs
for ever (measured: retention's `cleanup_log` on a bucket).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from typing import Iterator

from tests.support import ROOT
from tests.support.servers.ports import free_port

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}


@contextlib.contextmanager
def moto_s3(timeout: float = 60.0) -> Iterator[dict[str, str]]:
    """Start the server; yield the AWS_* environment that points fsspec/s3fs and delta-rs at it."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", __name__, "-H", "127.0.0.1", "-p", str(port)], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's S3 server did not start on {url} (exit code {process.poll()})")
                time.sleep(0.2)
        yield {"AWS_ENDPOINT_URL": url, **CREDENTIALS}
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def s3a_session(spark, env: dict[str, str]) -> Iterator[None]:
    """The test process's shared Spark session pointed at the server: the S3A settings the session factory
    derives from the AWS_* environment (stateops.storage.s3a_conf), set on the live Hadoop configuration and
    removed after (a session built in that environment gets them at start)."""
    from stateops.storage import s3a_conf

    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    settings = {key.removeprefix("spark.hadoop."): value for key, value in s3a_conf(env).items()}
    settings["fs.s3a.impl.disable.cache"] = settings["fs.s3.impl.disable.cache"] = "true"  # a server per module
    for key, value in settings.items():
        hadoop.set(key, value)
    try:
        yield
    finally:
        for key in settings:
            hadoop.unset(key)


def mirror(url: str, dest: str) -> str:
    """A local copy of the tree at `url` (s3://...), for oracles that read local files; returns `dest`."""
    import s3fs

    fs = s3fs.S3FileSystem()
    for path in fs.find(url.removeprefix("s3://")):
        local = os.path.join(dest, os.path.relpath(path, url.removeprefix("s3://")))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        fs.get(path, local)
    return dest


def copy_prefix(env: dict[str, str], bucket: str, source: str, dest: str) -> int:
    """Every object under `source`/ put under `dest`/ of the same bucket (server-side copies), after removing
    whatever `dest`/ held; returns how many were copied. With boto3, not through the code under test."""
    import boto3

    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"])
    pages = client.get_paginator("list_objects_v2")
    stale = [{"Key": item["Key"]} for page in pages.paginate(Bucket=bucket, Prefix=dest + "/")
             for item in page.get("Contents", [])]
    for start in range(0, len(stale), 1000):
        client.delete_objects(Bucket=bucket, Delete={"Objects": stale[start:start + 1000], "Quiet": True})
    copied = 0
    for page in pages.paginate(Bucket=bucket, Prefix=source + "/"):
        for item in page.get("Contents", []):
            client.copy_object(Bucket=bucket, Key=dest + item["Key"][len(source):],
                               CopySource={"Bucket": bucket, "Key": item["Key"]})
            copied += 1
    return copied


def keys(env: dict[str, str], bucket: str) -> list[str]:
    """Every key of `bucket`, listed with boto3 (not through the code under test)."""
    import boto3

    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"])
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def serve(argv: list[str]) -> None:
    """moto's server with two fixes, each measured on moto 5.2.5 / werkzeug 3.1.9:

    - `Expect: 100-continue` answered once. Werkzeug's handler answers it in `run_wsgi` and Python's
      http.server had already answered it, so a client that sends the header (the AWS SDK v2 on a large
      PutObject: S3A uploading a RocksDB SST) read the second `100 Continue` as the final response and failed
      the upload ("Status Code: 100").
    - one request at a time inside moto (connections still have their threads): moto checks a conditional
      write's precondition and then writes, so two concurrent `If-None-Match: *` creators could both win (two
      of eight in one of twenty trials). S3 makes that check atomic; so does this server now, which the
      control plane's race test relies on.
    """
    import threading

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from moto.server import main
    from werkzeug.serving import WSGIRequestHandler

    WSGIRequestHandler.handle_expect_100 = lambda self: True
    dispatch, one_at_a_time = DomainDispatcherApplication.__call__, threading.Lock()

    def serialized(self, environ, start_response):
        with one_at_a_time:
            return dispatch(self, environ, start_response)

    DomainDispatcherApplication.__call__ = serialized
    main(argv)


if __name__ == "__main__":
    serve(sys.argv[1:])


def fresh_bucket(env: dict[str, str], monkeypatch, name: str, versioned: bool = False):
    """A boto3 client on a new bucket `<name>-<random>` (`client.bucket`), with this process's AWS_* environment
    pointing at the server and no STATEOPS_CONTROL_HOME (the control records go to the home's bucket); s3fs
    forgets its clients of an earlier server. Versioned: the listing names every object ever written."""
    import uuid

    import boto3
    import s3fs

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("STATEOPS_CONTROL_HOME", raising=False)
    s3fs.S3FileSystem.clear_instance_cache()
    client = boto3.client("s3")
    client.bucket = f"{name}-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=client.bucket)
    if versioned:
        client.put_bucket_versioning(Bucket=client.bucket, VersioningConfiguration={"Status": "Enabled"})
    return client
