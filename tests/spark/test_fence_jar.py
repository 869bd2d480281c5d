"""The fence jar (stateops/jvm/stateops-fence.jar, put in force by stateops.control.fence.session, built from
jvm/fence by scripts/build-fence-jar): the committed jar is what its sources build to; two writers racing for one
commit point on a local disk, through the checkpoint manager or Delta's log store, leave exactly one winner, the
loser with the exception Spark or Delta expects and nothing behind; and the test process's Spark session writes its
checkpoints and Delta commits through it, so that a stale writer's attempt on an existing `offsets/0` or
`_delta_log/0.json` fails and changes nothing.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from stateops.control.fence.session import FENCE_JAR
from stateops.jvm.jars import JarsFolder
from tests.support.delta_writers import MISSING_JARS, spark_writer_available

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "build-fence-jar"
RACE = ROOT / "tests" / "support" / "fence_race" / "FenceRace.java"
HADOOP_FAE = "org.apache.hadoop.fs.FileAlreadyExistsException"
NIO_FAE = "java.nio.file.FileAlreadyExistsException"


def _javac() -> str:
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("javac (a JDK 17+) is not installed: the fence jar's sources cannot be compiled here")
    return javac


def _fetched_jar(prefix: str) -> str:
    """A pinned jar of `stateops jars fetch` (the build and the race compile against them)."""
    found = [jar for jar in JarsFolder.of().jars() if os.path.basename(jar).startswith(prefix)]
    if not found:
        pytest.skip("the pinned JVM jars are not fetched: run bash scripts/setup")
    return found[0]


def _pyspark_jars() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "jars")


def _build_jdk(jar: str) -> str:
    with zipfile.ZipFile(jar) as archive:
        manifest = archive.read("META-INF/MANIFEST.MF").decode()
    return re.search(r"^Build-Jdk: (\S+)", manifest, re.MULTILINE).group(1)


def test_the_committed_jar_is_what_its_sources_build_to(tmp_path):
    javac = _javac()
    _fetched_jar("delta-storage")
    here = subprocess.run([javac, "-version"], capture_output=True, text=True).stdout.split()[-1]
    if here != _build_jdk(FENCE_JAR):
        pytest.skip(f"javac here is {here}, the committed jar was built by {_build_jdk(FENCE_JAR)}: class files "
                    "differ between compilers")
    built = tmp_path / "stateops-fence.jar"
    done = subprocess.run(["bash", str(BUILD), str(built)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert built.read_bytes() == Path(FENCE_JAR).read_bytes(), \
        "stateops/jvm/stateops-fence.jar is not what jvm/fence builds to: run bash scripts/build-fence-jar"


def test_two_writers_racing_for_one_commit_point_leave_one_winner_and_nothing_else(tmp_path):
    """FenceRace (tests/support/fence_race) on pyspark's jars, delta-storage and the shipped jar, without hadoop-aws:
    local paths never load the S3A side."""
    javac = _javac()
    classpath = os.pathsep.join([os.path.join(_pyspark_jars(), "*"), _fetched_jar("delta-storage"), FENCE_JAR])
    classes = tmp_path / "classes"
    subprocess.run([javac, "--release", "17", "-d", str(classes), "-cp", classpath, str(RACE)], check=True,
                   capture_output=True, timeout=300)
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    done = subprocess.run([java, "-cp", os.pathsep.join([str(classes), classpath]), "FenceRace",
                           str(tmp_path / "race"), "100"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: dict(field.split("=", 1) for field in line.split()[1:])
             for line in done.stdout.splitlines()}
    for kind, loser in (("checkpoint", HADOOP_FAE), ("log", NIO_FAE)):
        assert lines[kind] == {"trials": "100", "one-winner": "100", "content-ok": "100", "leftovers": "0",
                               "loser": f"{loser}:100"}, (kind, done.stdout)


def _is(spark, exception, name: str) -> bool:
    return spark._jvm.java.lang.Class.forName(name).isInstance(exception)


def _hidden(folder: Path) -> list[str]:
    """Temp files and Hadoop's `.NAME.crc` sidecars (the stock writers leave those; the fence's none)."""
    return [name for name in os.listdir(folder) if name.startswith(".")]


def test_the_session_checkpoints_through_the_fence_and_a_stale_writer_changes_nothing(spark, tmp_path):
    from py4j.protocol import Py4JJavaError

    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def run(name: str, rows: str) -> None:
        (source / name).write_text(rows)
        query = (spark.readStream.schema("k string").json(str(source)).groupBy("k").count()
                 .writeStream.format("noop").outputMode("update").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(120)
        finally:
            query.stop()
        assert query.exception() is None

    run("a.json", '{"k": "x"}\n{"k": "y"}\n')
    run("b.json", '{"k": "x"}\n')  # a restart reads what the first run wrote, and commits batch 1
    offsets = checkpoint / "offsets"
    assert sorted(os.listdir(offsets)) == ["0", "1"] and sorted(os.listdir(checkpoint / "commits")) == ["0", "1"]
    assert _hidden(checkpoint) == [], "metadata: no temp file, no Hadoop .crc (the stock manager's)"

    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    path = jvm.org.apache.hadoop.fs.Path(str(offsets / "0"))
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        path.getParent(), conf)
    assert manager.getClass().getName() == "io.stateops.fence.CreateOnceCheckpointFileManager"
    before = (offsets / "0").read_bytes()
    stale = manager.createAtomic(path, False)
    stale.write(bytearray(b"v1\n{}\n"))
    with pytest.raises(Py4JJavaError) as err:
        stale.close()
    assert _is(spark, err.value.java_exception, HADOOP_FAE), err.value.java_exception.toString()
    stale.cancel()  # as HDFSMetadataLog does after a failed close: harmless
    assert (offsets / "0").read_bytes() == before and sorted(os.listdir(offsets)) == ["0", "1"]


def test_the_session_commits_delta_through_the_fence_and_a_stale_commit_changes_nothing(spark, tmp_path):
    """Through the log store Delta's transactions write with in this session (DeltaLog.store, resolved by scheme),
    without a transaction of its own: a commit, then a stale one of the same version."""
    from py4j.protocol import Py4JJavaError

    if not spark_writer_available():
        pytest.skip(MISSING_JARS)
    log = tmp_path / "table" / "_delta_log"
    log.mkdir(parents=True)
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    store = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(log.parent)).store()
    commit = jvm.org.apache.hadoop.fs.Path((log / "00000000000000000000.json").as_uri())  # qualified, as Delta's are

    def write(action: str) -> None:
        lines = jvm.java.util.Collections.singletonList(action).iterator()
        store.write(commit, jvm.scala.jdk.javaapi.CollectionConverters.asScala(lines), False, conf)

    write('{"commitInfo":{"writer":"live"}}')
    with pytest.raises(Py4JJavaError) as err:
        write('{"commitInfo":{"writer":"stale"}}')
    assert _is(spark, err.value.java_exception, NIO_FAE), err.value.java_exception.toString()
    assert (log / "00000000000000000000.json").read_text() == '{"commitInfo":{"writer":"live"}}\n'
    assert os.listdir(log) == ["00000000000000000000.json"], "no temp file, no Hadoop .crc (LocalLogStore's)"


def test_a_revoked_folder_gets_no_write_through_the_fence_and_its_neighbours_do(spark, tmp_path):
    """What a run that lost its lease revokes (stateops.control.fence.revocations.revoke): a commit point and a state
    file begun before the revocation are discarded at close, nothing new is created under the folder, Delta commits
    there are refused; a folder whose name merely starts the same is written as before; a new run's restore lets the
    folder be written again."""
    from py4j.protocol import Py4JJavaError

    from stateops.control.fence import revocations

    revoked, neighbour = tmp_path / "jobs" / "a", tmp_path / "jobs" / "ab"
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        jvm.org.apache.hadoop.fs.Path(str(tmp_path)), conf)

    def begin(path: Path, overwrite: bool):
        path.parent.mkdir(parents=True, exist_ok=True)
        stream = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(str(path)), overwrite)
        stream.write(bytearray(b"v1\n{}\n"))
        return stream

    in_flight = [begin(revoked / "offsets" / "3", False), begin(revoked / "state" / "0" / "4.changelog", True)]
    revocations.revoke(spark, [(revoked).as_uri() + "/"])
    for stream in in_flight:
        with pytest.raises(Py4JJavaError) as err:
            stream.close()
        assert "lost its job's lease" in err.value.java_exception.toString()
        stream.cancel()
    with pytest.raises(Py4JJavaError) as err:
        begin(revoked / "commits" / "3", False)
    assert "lost its job's lease" in err.value.java_exception.toString()
    assert [str(p.relative_to(revoked)) for p in revoked.rglob("*") if p.is_file()] == [], \
        "nothing of the revoked folder's, not even a temp file"
    begin(neighbour / "offsets" / "3", False).close()
    assert (neighbour / "offsets" / "3").read_bytes() == b"v1\n{}\n"
    revocations.restore(spark, [str(revoked)])  # a new run holds the lease: written again (revoked for Delta below)
    begin(revoked / "commits" / "3", False).close()
    assert (revoked / "commits" / "3").read_bytes() == b"v1\n{}\n"
    revocations.revoke(spark, [str(revoked)])

    if not spark_writer_available():
        return
    log = revoked / "table" / "_delta_log"
    log.mkdir(parents=True)
    store = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(log.parent)).store()
    lines = jvm.java.util.Collections.singletonList('{"commitInfo":{}}').iterator()
    with pytest.raises(Py4JJavaError) as err:
        store.write(jvm.org.apache.hadoop.fs.Path((log / "00000000000000000000.json").as_uri()),
                    jvm.scala.jdk.javaapi.CollectionConverters.asScala(lines), False, conf)
    assert "lost its job's lease" in err.value.java_exception.toString()
    assert os.listdir(log) == []
