"""moto's S3 server on loopback, in its own process, for the object-store tests and benchmarks.

Its own process, not moto's ThreadedMotoServer: some delta-rs calls (e.g. `alter.set_table_properties`)
hold the GIL while they wait for the HTTP answer, so a server thread in the same interpreter can never
answer them and the call hangs for ever (measured: retention's `cleanup_log` on a bucket).
"""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Iterator

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}


def free_port() -> int:
    """A loopback port nobody listens on now (the servers of the tests start on one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_s3(timeout: float = 60.0) -> Iterator[dict[str, str]]:
    """Start the server; yield the AWS_* environment that points fsspec/s3fs and delta-rs at it."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
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
