"""The fault harness's own primitives (tests/support/faults), tested before any fencing test trusts them: a
harness that silently changes what the clients send, or whose faults do not do what they say, would make every
verdict built on it meaningless: these are its controls, as the fence trials' negative control is theirs.

The proxy runs against moto's real S3 server (its own process) with the three S3 clients a StateOps process
uses: botocore (boto3, and s3fs/aiobotocore), Rust reqwest (delta-rs/object_store) and the AWS SDK v2 for Java
(Hadoop S3A in Spark's JVM: `Expect: 100-continue` and aws-chunked bodies). The local history is tested with plain
file operations; the process controls with a small process tree standing in for a driver and its JVM."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import threading
import time

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError

from stateops.faults import ENV, parse

from tests.support.faults import history, processes
from tests.support.faults.local_history import CreationWatcher
from tests.support.faults.proxy import FaultProxy, render_logs
from tests.support.faults.scenarios import scenarios
from tests.support.faults.trial import FENCED, SCENARIOS
from tests.support.servers.moto import fresh_bucket

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
# Keys a naive proxy would mangle: spaces, '+', '=', '%', non-ASCII, a double slash.
ODD_KEYS = ("plain.txt", "with space/and+plus=eq.bin", "percent%20literal", "ünïcödé/ключ", "double//slash")


def _client(endpoint: str, **retries):
    """A boto3 client on `endpoint` (the proxy or the server), with retries as given (botocore's defaults else)."""
    config = Config(retries=retries, connect_timeout=5, read_timeout=30) if retries else None
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                        region_name="us-east-1", config=config)


def _s3fs(endpoint: str, retries: int | None = None):
    """A private s3fs filesystem on `endpoint` (no instance cache: its retries are its own)."""
    import s3fs

    config = {"retries": {"max_attempts": retries}, "connect_timeout": 5, "read_timeout": 30} if retries else {}
    fs = s3fs.S3FileSystem(key="test", secret="test", endpoint_url=endpoint, skip_instance_cache=True,
                           client_kwargs={"region_name": "us-east-1"}, config_kwargs=config)
    if retries:
        fs.retries = retries  # s3fs's own retry loop, around botocore's
    return fs


def test_plain_requests_pass_through_byte_exact_and_are_logged_in_order(s3_env, monkeypatch):
    """Without a fault the proxy must be invisible: the same bytes, sizes, ranges and listings as the store gives,
    for odd keys too; every request logged once, in order, with its S3 operation."""
    s3 = fresh_bucket(s3_env, monkeypatch, "faults")
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], "A") as proxy:
        client = _client(proxy.url)
        bodies = {key: os.urandom(1000 + 7919 * n) for n, key in enumerate(ODD_KEYS)}
        for key, body in bodies.items():
            client.put_object(Bucket=s3.bucket, Key=key, Body=body)
        for key, body in bodies.items():
            assert client.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == body, proxy.render_log()
            assert s3.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == body  # as stored, read directly
            assert client.head_object(Bucket=s3.bucket, Key=key)["ContentLength"] == len(body)
        ranged = client.get_object(Bucket=s3.bucket, Key=ODD_KEYS[1], Range="bytes=10-19")
        assert ranged["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert ranged["Body"].read() == bodies[ODD_KEYS[1]][10:20]
        listed = [item["Key"] for item in client.list_objects_v2(Bucket=s3.bucket)["Contents"]]
        assert sorted(listed) == sorted(bodies)
        client.delete_object(Bucket=s3.bucket, Key=ODD_KEYS[0])

        fs = _s3fs(proxy.url)
        fs.pipe(f"{s3.bucket}/s3fs/one", b"\x00\xffbytes")
        assert fs.cat(f"{s3.bucket}/s3fs/one") == b"\x00\xffbytes"
        assert fs.info(f"{s3.bucket}/s3fs/one")["size"] == 7
        assert fs.ls(f"{s3.bucket}/s3fs", detail=False) == [f"{s3.bucket}/s3fs/one"]
        fs.rm(f"{s3.bucket}/s3fs/one")
        assert not fs.exists(f"{s3.bucket}/s3fs/one")

    log = proxy.log()
    assert [e.seq for e in log] == list(range(len(log)))
    assert {e.label for e in log} == {"A"} and {e.outcome for e in log} == {"forwarded"}, proxy.render_log()
    puts = [e for e in log if e.operation == "PutObject"]
    assert [e.key for e in puts[:len(ODD_KEYS)]] == [f"{s3.bucket}/{key}" for key in ODD_KEYS]
    assert all(e.landed and e.t_received <= e.t_answered for e in puts)
    assert [e.operation for e in log if e.key == f"{s3.bucket}/s3fs/one"][:1] == ["PutObject"]
    deletes = {(e.operation, e.status) for e in log if e.method in ("DELETE", "POST")}
    assert deletes == {("DeleteObject", 204), ("DeleteObjects", 200)}, proxy.render_log()


def _read_answer(sock) -> bytes:
    """One HTTP answer's head (and a body of Content-Length bytes) read off a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b"<closed>"
        assert not data.endswith(b"<closed>"), data
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(
        b"content-length:")), 0)
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_expect_continue_and_chunked_bodies_pass_through_on_a_kept_alive_connection(s3_env, monkeypatch):
    """The framing the AWS SDK v2 for Java uses (Expect: 100-continue, then a chunked body), sent by hand so that
    it is tested even where the JVM check is skipped: the proxy answers 100 Continue itself, de-chunks, and the
    store gets the bytes; the second request rides the same connection."""
    import socket

    s3 = fresh_bucket(s3_env, monkeypatch, "faults")
    signed = ("Authorization: AWS4-HMAC-SHA256 Credential=test/20250101/us-east-1/s3/aws4_request, "
              "SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=0\r\n"
              "x-amz-content-sha256: UNSIGNED-PAYLOAD\r\nx-amz-date: 20250101T000000Z\r\n")
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], "raw") as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(f"PUT /{s3.bucket}/raw/chunked HTTP/1.1\r\nHost: {host}:{port}\r\n{signed}"
                         "Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
            assert _read_answer(sock).startswith(b"HTTP/1.1 100 Continue")
            sock.sendall(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
            assert _read_answer(sock).startswith(b"HTTP/1.1 200"), proxy.render_log()
            sock.sendall(f"GET /{s3.bucket}/raw/chunked HTTP/1.1\r\nHost: {host}:{port}\r\n{signed}\r\n".encode())
            assert _read_answer(sock).startswith(b"HTTP/1.1 200"), proxy.render_log()
    assert s3.get_object(Bucket=s3.bucket, Key="raw/chunked")["Body"].read() == b"hello world"
    put, get = proxy.log()
    assert (put.framing, put.size, put.status) == (("100-continue", "chunked"), 11, 200), proxy.render_log()
    assert put.client_port == get.client_port


def test_a_multipart_upload_passes_through(s3_env, monkeypatch):
    from boto3.s3.transfer import TransferConfig

    s3 = fresh_bucket(s3_env, monkeypatch, "faults")
    body = os.urandom(5 * MIB + 1234)  # two parts: moto refuses parts under 5 MiB but the last
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], "A") as proxy:
        _client(proxy.url).upload_fileobj(io.BytesIO(body), s3.bucket, "boto3/big", Config=TransferConfig(
            multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB, use_threads=False))
        with _s3fs(proxy.url).open(f"{s3.bucket}/s3fs/big", "wb", block_size=5 * MIB) as handle:
            handle.write(body)
    for key, parts in (("boto3/big", 2), ("s3fs/big", 1)):  # s3fs folds a short last block into the part before
        assert s3.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == body, key
        steps = [e.key.rpartition("#")[2] for e in proxy.log() if e.key.startswith(f"{s3.bucket}/{key}#")]
        assert steps == ["create-multipart", *(f"part-{n}" for n in range(1, parts + 1)),
                         "complete-multipart"], proxy.render_log()


def test_a_held_put_lands_only_after_release_over_the_write_made_meanwhile(s3_env, monkeypatch):
    """The "delayed write": writer A's PUT of a commit point is held at its proxy; writer B writes the same key
    meanwhile; on release A's bytes land last, and the bucket's versions show B's write as the older version,
    which the history oracle reports as a rewritten commit point."""
    s3 = fresh_bucket(s3_env, monkeypatch, "faults")
    history.enable_versioning(s3, s3.bucket)
    key = "job/checkpoint/offsets/3"
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], "A") as proxy_a, \
            FaultProxy(s3_env["AWS_ENDPOINT_URL"], "B") as proxy_b:
        hold = proxy_a.hold("PUT", r"/offsets/\d+$")
        answers = {}
        writer_a = threading.Thread(target=lambda: answers.update(
            a=_client(proxy_a.url).put_object(Bucket=s3.bucket, Key=key, Body=b"from A")))
        writer_a.start()
        held = hold.wait_held(timeout=20)
        assert (held.label, held.key, held.outcome) == ("A", f"{s3.bucket}/{key}", "pending")

        _client(proxy_b.url).put_object(Bucket=s3.bucket, Key=key, Body=b"from B")
        proxy_b.wait_for(lambda e: e.landed and e.key.endswith(key), timeout=5)
        assert s3.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == b"from B"
        time.sleep(0.2)
        hold.release()
        answered = hold.wait_answered(timeout=20)
        writer_a.join(20)
        timeline = render_logs(proxy_a, proxy_b)

    assert answers["a"]["ResponseMetadata"]["HTTPStatusCode"] == 200, timeline
    assert answered.landed and answered.held_seconds >= 0.2, timeline
    assert s3.get_object(Bucket=s3.bucket, Key=key)["Body"].read() == b"from A", timeline
    found = history.versions(s3, s3.bucket, "job/")
    assert [v.size for v in found[key]] == [len(b"from B"), len(b"from A")], history.render(found)
    assert list(history.rewritten_commit_points(found)) == [key]
    b_put = next(e for e in proxy_b.log() if e.key.endswith(key))
    assert held.t_received < b_put.t_answered < answered.t_answered, timeline


def test_a_held_write_lands_on_release_even_after_its_client_gave_up(s3_env, monkeypatch):
    """The zombie's write: its client timed out and moved on (no retry here), yet the bytes the proxy holds reach
    the store on release, and the log says the answer found no one to deliver it to."""
    s3 = fresh_bucket(s3_env, monkeypatch, "faults")
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], "A") as proxy:
        hold = proxy.hold("PUT", r"/_delta_log/\d{20}\.json$")
        impatient = boto3.client("s3", endpoint_url=proxy.url, aws_access_key_id="test", aws_secret_access_key="test",
                                 region_name="us-east-1",
                                 config=Config(read_timeout=0.5, retries={"total_max_attempts": 1}))
        with pytest.raises(BotoCoreError):
            impatient.put_object(Bucket=s3.bucket, Key="t/_delta_log/00000000000000000001.json", Body=b"late")
        hold.wait_held(timeout=5)
        time.sleep(0.2)  # the client's side of the connection is closed by now
        hold.release()
        answered = hold.wait_answered(timeout=10)
    assert answered.landed and "client gone: answer not delivered" in answered.notes, proxy.render_log()
    assert s3.get_object(Bucket=s3.bucket, Key="t/_delta_log/00000000000000000001.json")["Body"].read() == b"late"


def test_commit_points_are_the_write_once_keys_of_a_checkpoint_and_a_delta_log():
    kinds = {key: history.commit_point_kind(key) for key in (
        "b/ck/metadata", "b/ck/offsets/12", "b/ck/commits/3", "b/ck/sources/0/7", "b/ck/sources/0/9.compact",
        "b/t/_delta_log/00000000000000000003.json", "b/ck/state/0/_metadata/metadata", "b/ck/offsets/.12.x.tmp",
        "b/t/_delta_log/00000000000000000003.checkpoint.parquet", "b/t/_delta_log/_last_checkpoint",
        "b/ck/state/0/0/1.changelog")}
    assert kinds == {"b/ck/metadata": "metadata", "b/ck/offsets/12": "offsets", "b/ck/commits/3": "commits",
                     "b/ck/sources/0/7": "sources", "b/ck/sources/0/9.compact": "sources",
                     "b/t/_delta_log/00000000000000000003.json": "delta-log",
                     # rewritten by design, or not a commit point
                     "b/ck/state/0/_metadata/metadata": None, "b/ck/offsets/.12.x.tmp": None,
                     "b/t/_delta_log/00000000000000000003.checkpoint.parquet": None,
                     "b/t/_delta_log/_last_checkpoint": None, "b/ck/state/0/0/1.changelog": None}


def test_a_dropped_request_is_a_reset_the_sdk_retries(s3_env, monkeypatch):
    s3 = fresh_bucket(s3_env, monkeypatch, "faults")
    history.enable_versioning(s3, s3.bucket)
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], "A") as proxy:
        hold = proxy.hold("PUT", r"/commits/0$")
        writer = threading.Thread(target=_client(proxy.url).put_object,
                                  kwargs={"Bucket": s3.bucket, "Key": "c/commits/0", "Body": b"once"})
        writer.start()
        hold.wait_held(timeout=20)
        hold.drop()
        writer.join(30)
    outcomes = [(e.outcome, e.status) for e in proxy.log() if e.key.endswith("commits/0")]
    assert outcomes == [("dropped", None), ("forwarded", 200)], proxy.render_log()  # botocore's retry passed
    assert len(history.versions(s3, s3.bucket, "c/")["c/commits/0"]) == 1


def test_delay_adds_at_least_its_seconds_to_matching_requests_only(s3_env, monkeypatch):
    """A slow store for one client and one kind of request (a lease renewal arriving after its expiry), the rest
    at full speed; cleared, it stops at once."""
    s3 = fresh_bucket(s3_env, monkeypatch, "faults")
    s3.put_object(Bucket=s3.bucket, Key="slow/x", Body=b"x")
    s3.put_object(Bucket=s3.bucket, Key="fast/x", Body=b"x")
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], "A") as proxy:
        client = _client(proxy.url)

        def timed(key: str) -> float:
            started = time.monotonic()
            client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
            return time.monotonic() - started

        timed("fast/x")  # the connection is made
        delay = proxy.delay(0.5, "GET", r"/slow/")
        assert timed("slow/x") >= 0.5
        assert timed("fast/x") < 0.5
        delay.clear()
        assert timed("slow/x") < 0.5
    delayed = [e for e in proxy.log() if e.delayed_seconds]
    assert [e.key for e in delayed] == [f"{s3.bucket}/slow/x"] and delayed[0].delayed_seconds >= 0.5


def test_partition_makes_calls_fail_and_heal_restores_them(s3_env, monkeypatch):
    """Partitioned, the proxy resets every connection after reading the request: botocore and s3fs retry (each
    attempt is logged as refused) and raise a connection error; healed, the same clients work again."""
    s3 = fresh_bucket(s3_env, monkeypatch, "faults")
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], "A") as proxy:
        client, fs = _client(proxy.url, mode="standard", max_attempts=2), _s3fs(proxy.url, retries=1)
        client.put_object(Bucket=s3.bucket, Key="k", Body=b"before")
        proxy.partition()
        before = len(proxy.log())
        with pytest.raises(BotoCoreError):
            client.put_object(Bucket=s3.bucket, Key="k", Body=b"during")
        with pytest.raises((BotoCoreError, OSError)):
            fs.cat(f"{s3.bucket}/k")
        refused = proxy.log()[before:]
        assert len(refused) >= 3 and {e.outcome for e in refused} == {"refused"}, proxy.render_log()
        proxy.heal()
        client.put_object(Bucket=s3.bucket, Key="k", Body=b"after")
        assert fs.cat(f"{s3.bucket}/k") == b"after"
    assert s3.get_object(Bucket=s3.bucket, Key="k")["Body"].read() == b"after"


DELTA_RS_WRITE = textwrap.dedent("""
    import sys
    import pyarrow as pa
    from deltalake import write_deltalake
    url, endpoint = sys.argv[1:3]
    options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "test",
               "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}
    write_deltalake(url, pa.table({"id": [1, 2, 3]}), storage_options=options)
    write_deltalake(url, pa.table({"id": [4]}), storage_options=options, mode="append")
""")


def test_delta_rs_writes_a_table_through_the_proxy(s3_env, monkeypatch, tmp_path):
    """delta-rs (object_store over reqwest) in a process of its own, as in a StateOps process (some delta-rs
    calls hold the GIL while they wait for HTTP: the proxy's thread must not share their interpreter)."""
    from deltalake import DeltaTable

    s3 = fresh_bucket(s3_env, monkeypatch, "faults")
    url = f"s3://{s3.bucket}/tables/t"
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], "rs") as proxy:
        done = subprocess.run([sys.executable, "-c", DELTA_RS_WRITE, url, proxy.url], capture_output=True,
                              text=True, timeout=120)
    assert done.returncode == 0, done.stderr + proxy.render_log()
    commits = [e for e in proxy.log() if history.commit_point_kind(e.key) == "delta-log" and e.method == "PUT"]
    assert [(e.key.rsplit("/", 1)[1], e.landed, e.condition) for e in commits] == [
        ("00000000000000000000.json", True, "If-None-Match: *"),
        ("00000000000000000001.json", True, "If-None-Match: *")], proxy.render_log()
    direct = {"AWS_ENDPOINT_URL": s3_env["AWS_ENDPOINT_URL"], "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "test",
              "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}
    table = DeltaTable(url, storage_options=direct)
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3, 4] and table.version() == 1


@pytest.mark.long  # the default run: the proxy under boto3 and delta-rs (this module); the JVM: the fence trials
@pytest.mark.spark
def test_the_jvm_writes_through_the_proxy(s3_env, monkeypatch, request):
    """S3A (AWS SDK v2 for Java) in the test process's Spark JVM, pointed at the proxy: its PutObjects come with
    `Expect: 100-continue` and aws-chunked bodies, its renames as CopyObject + DeleteObject, over keep-alive."""
    from stateops.jvm.jars import JarsFolder
    from tests.support.servers.moto import s3a_session

    if not JarsFolder.of().jars():
        pytest.skip("the pinned jars (S3A) were not fetched: run bash scripts/setup; the JVM check needs them")
    spark = request.getfixturevalue("spark")
    s3 = fresh_bucket(s3_env, monkeypatch, "faults")
    with FaultProxy(s3_env["AWS_ENDPOINT_URL"], "jvm") as proxy, s3a_session(spark, proxy.env(s3_env)):
        spark.range(1000).selectExpr("id", "uuid() AS u").coalesce(1).write.parquet(f"s3a://{s3.bucket}/jvm/p")
        assert spark.read.parquet(f"s3a://{s3.bucket}/jvm/p").count() == 1000
    log = proxy.log()
    stored = [item["Key"] for item in s3.list_objects_v2(Bucket=s3.bucket, Prefix="jvm/p/")["Contents"]]
    assert any(key.endswith(".parquet") for key in stored) and "jvm/p/_SUCCESS" in stored, stored
    puts = [e for e in log if e.operation == "PutObject" and e.size]
    assert puts and all(e.landed for e in puts), proxy.render_log()
    assert any("100-continue" in e.framing for e in puts), proxy.render_log()
    assert any(e.operation == "CopyObject" and e.landed for e in log), proxy.render_log()
    assert {e.outcome for e in log} == {"forwarded"} and all(e.status < 500 for e in log), proxy.render_log()
    assert len({e.client_port for e in log}) < len(log) / 2, "S3A keeps its connections to the proxy alive"
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    assert processes.jvm_pid(os.getpid()) == jvm  # how a harness finds a StateOps process's JVM to freeze it


def test_the_creation_watcher_counts_rename_over_each_time_and_a_hard_link_once(tmp_path):
    """The local oracle tells an overwrite (rename over an existing commit point: two creations) from a create-once
    commit (a hard link: one, and the refused second attempt none), in directories made during the watch too."""
    root = tmp_path / "home"
    (root / "checkpoint" / "offsets").mkdir(parents=True)
    (root / "checkpoint" / "offsets" / "0").write_text("existing before the watch")

    def rename_over(final, text: str) -> None:
        temp = final.parent / f".{final.name}.tmp"
        temp.write_text(text)
        os.rename(temp, final)

    with CreationWatcher(str(root)) as watcher:
        offsets = root / "checkpoint" / "offsets"
        rename_over(offsets / "1", "writer A")
        rename_over(offsets / "1", "writer B")  # the overwrite a create-once commit must never allow
        temp = offsets / ".2.tmp"
        temp.write_text("A")
        os.link(temp, offsets / "2")  # create-once: the second attempt fails and creates nothing
        with pytest.raises(FileExistsError):
            os.link(temp, offsets / "2")
        (offsets / "0").write_text("rewritten in place: no new name")
        nested = root / "checkpoint" / "state" / "0" / "0"
        nested.mkdir(parents=True)
        (nested / "1.changelog").write_text("made at once in a new directory")
        assert watcher.creations(r"offsets/\d+$") == {"checkpoint/offsets/1": 2, "checkpoint/offsets/2": 1}
        assert watcher.creations(r"\.changelog$") == {"checkpoint/state/0/0/1.changelog": 1}
        assert watcher.creations("state", dirs=True) == {"checkpoint/state": 1, "checkpoint/state/0": 1,
                                                         "checkpoint/state/0/0": 1,
                                                         "checkpoint/state/0/0/1.changelog": 1}
        kinds = {(c.path, c.kind) for c in watcher.events()}
        assert ("checkpoint/offsets/1", "moved_to") in kinds and ("checkpoint/offsets/2", "create") in kinds


STAND_IN = textwrap.dedent("""
    import subprocess, sys, time
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    child = subprocess.Popen(sleep)  # the JVM: same process group
    stray = subprocess.Popen(sleep, process_group=0)  # pyspark's worker daemon: a group of its own
    print("children", child.pid, stray.pid, flush=True)
    time.sleep(60)
""")


def test_freeze_stops_the_group_or_the_python_process_only_and_crash_kills_the_group(tmp_path):
    """A Python process with two children, standing in for the driver, its JVM and pyspark's worker daemon
    (which leaves the group)."""
    with processes.running([sys.executable, "-c", STAND_IN], str(tmp_path / "out.log")) as proc:
        deadline = time.monotonic() + 20
        while "children" not in proc.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        child, stray = (int(pid) for pid in proc.output().split()[1:3])
        assert sorted(processes.descendants(proc.pid)) == sorted([child, stray])
        assert processes.jvm_pid(proc) is None

        def states() -> tuple[str, str, str]:
            time.sleep(0.1)
            return processes.state(proc.pid), processes.state(child), processes.state(stray)

        processes.freeze(proc, "python")
        python, *children = states()
        assert python == "T" and "T" not in children, (python, children)  # running or asleep (R or S): not stopped
        processes.thaw(proc, "python")
        processes.freeze(proc, "group")
        assert states() == ("T", "T", "T")
        processes.thaw(proc, "group")
        assert "T" not in states()
        processes.crash(proc)
        code, output = processes.wait_exit(proc, timeout=10)
    assert code == -9 and output.startswith(f"children {child} {stray}")
    time.sleep(0.1)
    assert processes.state(child) in ("", "Z") and processes.state(stray) in ("", "Z")


def test_each_scenario_arms_its_fault_where_it_strikes_and_the_negative_control_runs_the_fenced_ones():
    """The trials' scenarios (tests/support/faults/scenarios.py) as the fence tests use them: a fault point armed in
    A's environment as stateops.faults parses it, a skewed clock in B's, the proxy's faults only on S3, and the
    negative control on the scenarios whose invariants the fence keeps."""
    found = scenarios(4.0)
    assert set(found) == set(SCENARIOS) and len(found) == 11
    assert sorted(FENCED) == sorted(name for name in found if name not in ("slow-store", "crash-restart"))
    armed = found["freeze-in-batch"].a_env({}, "user_activity", 2)[ENV]
    assert parse(armed) == (("sink.before_commit", (("job", "user_activity"), ("table", "user_activity"),
                                                    ("batch", "2"), ("then", "freeze"))),)
    assert parse(found["freeze-in-heartbeat"].a_env({ENV: "fence.off"}, "j", 1)[ENV])[0] == ("fence.off", ())
    assert found["skewed-clock"].b_env({}, 4.0) == {ENV: "clock.skew:seconds=8.0"}
    assert all(found[name].stores == ("s3",) for name in ("hold-offsets", "hold-commits", "hold-delta-commit",
                                                          "partition", "slow-store"))
    assert found["crash-restart"].kills and not found["slow-store"].takeover
