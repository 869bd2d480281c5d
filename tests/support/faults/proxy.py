"""`FaultProxy`: an HTTP reverse proxy on loopback between one StateOps process and the S3 server (moto), with the
faults a fencing test needs and a log of every request.

Why HTTP-aware and not a TCP proxy (Toxiproxy): the fencing scenarios act on one request of one writer, "hold
writer A's next PUT to `_delta_log/N.json`", and judge the run by which writer wrote which key when; a TCP proxy
sees neither requests nor keys. One proxy per process gives each request its writer (the proxy's `label`).

How it forwards: every request is read in full (the `Expect: 100-continue` handshake answered by the proxy; HTTP
chunked bodies de-chunked; an `aws-chunked` body, the SDKs' own framing inside the body, passed on byte for byte
with its Content-Encoding), then sent to the upstream with the same method, raw path and query, headers (Host
rewritten: moto does not check signatures) and a Content-Length, on a fresh upstream connection (never a retry
of a stale pooled one, which could land a write twice). The answer goes back unchanged (status, headers but the
hop-by-hop ones, body; no decompression either way). Clients keep their keep-alive connections to the proxy.

How it fails a request: a connection reset (RST, SO_LINGER 0) after the request was read, never an HTTP error:
to every SDK a reset is "no answer, outcome unknown", which they retry as a network error and surface as one
after their retries (botocore/aiobotocore: ConnectionClosedError / EndpointConnectionError; AWS SDK v2: an
SdkClientException under S3A's retry policy; reqwest: a connection error under object_store's retries). A 503
would be an answer from S3 (throttling), retried much longer and never reported as a partition.

Threads: the proxy runs its own asyncio loop in a daemon thread; every fault is set and cleared from the test's
thread, under one lock, at any time. The test's process must not be the one whose calls hold the GIL while they
wait for HTTP (some delta-rs calls do: tests/support/servers/moto.py): run such clients in a subprocess.
"""
from __future__ import annotations

import asyncio
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from tests.support.faults import s3_operations
from tests.support.faults.proxy_log import DROPPED, FORWARDED, REFUSED, Entry, render
from tests.support.servers.ports import LOOPBACK

# Headers of one connection, not of the request (RFC 9110 7.6.1), and those the proxy sets itself.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
                        "te", "trailer", "transfer-encoding", "upgrade"})
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "expect"}
# aiohttp's client adds these when absent: a forwarded request must carry only what the client sent.
NO_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
STOP_TIMEOUT = 10.0


class _Matcher:
    """A method (None: any) and a regex searched in the entry's key (None: any key)."""

    def __init__(self, method: str | None, key_regex: str | None):
        self.method = method.upper() if method else None
        self.pattern = re.compile(key_regex) if key_regex is not None else None

    def matches(self, entry: Entry) -> bool:
        return ((self.method is None or entry.method == self.method)
                and (self.pattern is None or self.pattern.search(entry.key) is not None))

    def __repr__(self) -> str:
        return f"{self.method or '*'} {self.pattern.pattern if self.pattern else '.*'}"


class Hold:
    """The next request matching (method, key regex) is read in full and kept, not forwarded, until `release()`
    (it is then forwarded: the "delayed write" that lands after whatever happened meanwhile, even if its client
    has given up and retried) or `drop()` (its client gets a connection reset). One request per hold: the next
    matching one, e.g. the client's own retry, passes. Requests refused by a partition are never caught; a request
    already held stays held through `partition()`: it is past the cut, like a packet in flight."""

    ARMED, HELD, RELEASED, DROPPED, CANCELLED = "armed", "held", "released", "dropped", "cancelled"

    def __init__(self, proxy: "FaultProxy", matcher: _Matcher):
        self._proxy = proxy
        self.matcher = matcher
        self.state = Hold.ARMED
        self._entry: Entry | None = None
        self._decision: asyncio.Future | None = None
        self._held = threading.Event()
        self._answered = threading.Event()

    def wait_held(self, timeout: float) -> Entry:
        """Blocks until a request is being held; returns its log entry."""
        if not self._held.wait(timeout):
            raise TimeoutError(f"no request matched {self} within {timeout}s\n{self._proxy.render_log()}")
        with self._proxy._lock:
            return self._entry.snapshot()

    def release(self) -> None:
        """Forward the held request now (returns at once; `wait_answered` waits for the store's answer)."""
        self._decide(Hold.RELEASED)

    def drop(self) -> None:
        """Answer the held request with a connection reset; it never reaches the store."""
        self._decide(Hold.DROPPED)

    def cancel(self) -> None:
        """Disarm a hold that has not caught a request yet (a held one must be released or dropped)."""
        with self._proxy._lock:
            if self.state == Hold.ARMED:
                self.state = Hold.CANCELLED
                self._proxy._holds.remove(self)
            elif self.state == Hold.HELD:
                raise RuntimeError(f"{self} holds a request: release() or drop() it")

    def wait_answered(self, timeout: float) -> Entry:
        """Blocks until the held request was answered (forwarded and answered, or reset); returns its entry."""
        if not self._answered.wait(timeout):
            raise TimeoutError(f"{self} was not answered within {timeout}s\n{self._proxy.render_log()}")
        with self._proxy._lock:
            return self._entry.snapshot()

    @property
    def entry(self) -> Entry | None:
        with self._proxy._lock:
            return self._entry.snapshot() if self._entry else None

    def _decide(self, decision: str) -> None:
        with self._proxy._lock:
            if self.state != Hold.HELD:
                raise RuntimeError(f"{self} is {self.state}, not holding a request (wait_held first)")
            self.state = decision
            future = self._decision
            self._proxy._holds.remove(self)
        self._proxy._loop.call_soon_threadsafe(lambda: future.done() or future.set_result(decision))

    def __repr__(self) -> str:
        return f"Hold({self.matcher!r} on {self._proxy.label}: {self.state})"


@dataclass
class Delay:
    """Every request matching (method, key regex) received while the delay is set is forwarded `seconds` late: a
    slow store, for this proxy's client only. Delays that match one request add up."""

    seconds: float
    matcher: _Matcher
    _proxy: "FaultProxy" = field(repr=False)

    def clear(self) -> None:
        """Requests received from now on are not delayed by this (those already waiting finish their wait)."""
        with self._proxy._lock:
            if self in self._proxy._delays:
                self._proxy._delays.remove(self)


class FaultProxy:
    """An HTTP reverse proxy from `url` (127.0.0.1, a free port) to `upstream`, serving the process `label`.

    Use as a context manager (or start()/stop()). Faults: `hold`, `delay`, `partition`/`heal`, `clear`. Log:
    `log()`, `render_log()`, `wait_for()`.
    """

    def __init__(self, upstream: str, label: str, port: int = 0):
        self.upstream = upstream.rstrip("/")
        self.label = label
        self._port = port
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._entries: list[Entry] = []
        self._holds: list[Hold] = []
        self._delays: list[Delay] = []
        self._partitioned = False
        self._cut_at: int | None = None  # partition from this request on (its number in the log)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    # --- life cycle ---

    def start(self) -> "FaultProxy":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, self._port))
        sock.listen(128)
        self.url = f"http://{LOOPBACK}:{sock.getsockname()[1]}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"fault-proxy-{self.label}", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(sock), self._loop).result(STOP_TIMEOUT)
        return self

    def stop(self) -> None:
        """Drops any request still held (its client gets a reset), stops serving, ends the thread."""
        if self._loop is None:
            return
        for hold in self._disarm():
            hold.drop()
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(STOP_TIMEOUT * 3)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(STOP_TIMEOUT)
            self._loop.close()
            self._loop = None

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` (an AWS_* environment such as moto_s3() yields) with the endpoint pointing at this proxy."""
        return {**base, "AWS_ENDPOINT_URL": self.url}

    # --- faults ---

    def hold(self, method: str | None, key_regex: str | None) -> Hold:
        """Hold the next request matching `method` (None: any) and `key_regex` (re.search on the entry's key,
        `bucket/key` plus a multipart marker)."""
        hold = Hold(self, _Matcher(method, key_regex))
        with self._lock:
            self._holds.append(hold)
        return hold

    def delay(self, seconds: float, method: str | None = None, key_regex: str | None = None) -> Delay:
        """Forward every matching request received from now on `seconds` late, until the returned Delay's
        `clear()` (or `clear_delays()`)."""
        delay = Delay(seconds, _Matcher(method, key_regex), self)
        with self._lock:
            self._delays.append(delay)
        return delay

    def clear_delays(self) -> None:
        with self._lock:
            self._delays.clear()

    def partition(self) -> None:
        """From now on every request from this proxy's client is read, logged as refused and answered with a
        connection reset (see the module's docstring), until `heal()`. Requests already held or delayed are past
        the cut and still forwarded when due."""
        with self._lock:
            self._partitioned = True

    def partition_from(self, request: int) -> None:
        """Partition (as `partition`) from the `request`-th request on (0: the next one), counted from now: the
        store cut off at an exact moment of a client's work."""
        with self._lock:
            self._cut_at = len(self._entries) + request

    def heal(self) -> None:
        with self._lock:
            self._partitioned, self._cut_at = False, None

    @property
    def partitioned(self) -> bool:
        with self._lock:
            return self._partitioned

    def clear(self) -> None:
        """No fault any more: heal, clear the delays, cancel armed holds and release held requests."""
        with self._lock:
            self._partitioned, self._cut_at = False, None
            self._delays.clear()
        for hold in self._disarm():
            hold.release()

    def _disarm(self) -> list[Hold]:
        """Cancel the armed holds; the holds holding a request now (to be released or dropped by the caller)."""
        with self._lock:
            held = [hold for hold in self._holds if hold.state == Hold.HELD]
            for hold in self._holds:
                if hold.state == Hold.ARMED:
                    hold.state = Hold.CANCELLED
            self._holds = held
        return held

    # --- the log ---

    def log(self) -> list[Entry]:
        """Every request received so far, in order of receipt (snapshots)."""
        with self._lock:
            return [entry.snapshot() for entry in self._entries]

    def render_log(self, origin: float | None = None) -> str:
        return f"--- proxy {self.label} -> {self.upstream} ---\n{render(self.log(), origin)}"

    def wait_for(self, predicate: Callable[[Entry], bool], timeout: float) -> Entry:
        """Blocks until an entry satisfies `predicate` (checked on every new request and every answer); returns
        it. E.g. `wait_for(lambda e: e.landed and e.key.endswith('/offsets/3'), 60)` to time a fault."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for entry in self._entries:
                    if predicate(entry):
                        return entry.snapshot()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
        raise TimeoutError(f"no request of {self.label} matched within {timeout}s\n{self.render_log()}")

    # --- the server (the proxy's own thread) ---

    async def _serve(self, sock: socket.socket) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)  # the default expect handler answers 100-continue
        self._runner = web.AppRunner(app, access_log=None, auto_decompress=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock, shutdown_timeout=1.0).start()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=300),
            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=NO_AUTO_HEADERS)

    async def _shutdown(self) -> None:
        await self._runner.cleanup()
        await self._session.close()

    def _record(self, request: web.Request, body: bytes) -> tuple[Entry, bool, Hold | None, float]:
        """The request's entry, appended to the log; and, decided at once under the lock: partitioned?, the hold
        that takes it, the delay it gets."""
        path, _, query = request.raw_path.partition("?")
        params = s3_operations.parse_query(query)
        headers = request.headers
        key = s3_operations.object_key(path)
        marker = s3_operations.multipart_marker(request.method, params)
        entry = Entry(
            seq=0, label=self.label, method=request.method, key=key + marker, query=query,
            operation=s3_operations.operation(request.method, key, params, headers),
            t_received=time.monotonic(), wall_received=time.time(), size=len(body),
            condition=s3_operations.condition(headers), copy_source=headers.get("x-amz-copy-source"),
            framing=s3_operations.framing(headers), client_port=_client_port(request))
        with self._changed:
            entry.seq = len(self._entries)
            self._entries.append(entry)
            if self._cut_at is not None and entry.seq >= self._cut_at:
                self._partitioned = True
            partitioned = self._partitioned
            hold = None if partitioned else next(
                (h for h in self._holds if h.state == Hold.ARMED and h.matcher.matches(entry)), None)
            if hold is not None:
                hold.state, hold._entry = Hold.HELD, entry
                hold._decision = asyncio.get_running_loop().create_future()
            delay = sum(d.seconds for d in self._delays if d.matcher.matches(entry))
            self._changed.notify_all()
        if hold is not None:
            hold._held.set()
        return entry, partitioned, hold, delay

    def _finish(self, entry: Entry, outcome: str, status: int | None = None, error: str | None = None) -> None:
        with self._changed:
            entry.outcome, entry.status, entry.error, entry.t_answered = outcome, status, error, time.monotonic()
            self._changed.notify_all()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.content.read()
        entry, partitioned, hold, delay = self._record(request, body)
        try:
            if partitioned:
                self._finish(entry, REFUSED)
                return _reset(request)
            if hold is not None:
                decision = await hold._decision
                with self._lock:
                    entry.held_seconds = time.monotonic() - entry.t_received
                if decision == Hold.DROPPED:
                    self._finish(entry, DROPPED)
                    return _reset(request)
            if delay:
                started = time.monotonic()
                await asyncio.sleep(delay)
                with self._lock:
                    entry.delayed_seconds = time.monotonic() - started
            return await self._forward(request, body, entry)
        finally:
            if hold is not None:
                hold._answered.set()

    async def _forward(self, request: web.Request, body: bytes, entry: Entry) -> web.StreamResponse:
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in NOT_FORWARDED)
        data = body if body or request.method in ("PUT", "POST", "PATCH") else None
        try:
            async with self._session.request(request.method, URL(self.upstream + request.raw_path, encoded=True),
                                             headers=headers, data=data, allow_redirects=False) as upstream:
                payload = await upstream.read()
                status, reason, answer = upstream.status, upstream.reason, upstream.headers
        except Exception as exc:  # noqa: BLE001 - the store gave no answer: neither does the proxy (never a 5xx)
            self._finish(entry, FORWARDED, error=f"upstream: {type(exc).__name__}: {exc}")
            return _reset(request)
        out = CIMultiDict((k, v) for k, v in answer.items() if k.lower() not in HOP_BY_HOP | {"content-length"})
        if request.method == "HEAD" and "Content-Length" in answer:
            out["Content-Length"] = answer["Content-Length"]  # the object's size, with no body
        if request.transport is None or request.transport.is_closing():
            with self._lock:
                entry.notes.append("client gone: answer not delivered")
        self._finish(entry, FORWARDED, status)
        return web.Response(status=status, reason=reason, headers=out, body=payload)


def _client_port(request: web.Request) -> int | None:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return peer[1] if peer else None


def _reset(request: web.Request) -> web.StreamResponse:
    """Reset the client's connection (RST, not FIN): to the client, the request got no answer at all."""
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response(status=499)  # never written: aiohttp finds the transport closed


def render_logs(*proxies: FaultProxy) -> str:
    """The logs of several proxies merged into one timeline (they share the test process's monotonic clock)."""
    labels = ", ".join(f"{p.label} -> {p.upstream} ({p.url})" for p in proxies)
    return f"--- proxies {labels} ---\n" + render([entry for proxy in proxies for entry in proxy.log()])
