"""The session factory's settings, as data: RocksDB with changelog, machine-sized partitions, no downloads."""
from __future__ import annotations

import sys
import zipfile

import pytest

from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.control.fence.session import CHECKPOINT_FILE_MANAGER, FENCE_JAR, LOG_STORE
from stateops.jvm.jars import JarsFolder
from tests.support.fetched_jars import fetched_jars

from stateops.jobs.runtime.python_workers import worker_python
from stateops.jobs.runtime.session import console_log_for, delta_jars_on_classpath, spark_conf
from stateops.checkpoints.state_store import ROCKSDB_PROVIDER
from stateops.storage import s3a_conf
from stateops.errors import ConfigError

pytestmark = pytest.mark.unit


def test_defaults(monkeypatch):
    monkeypatch.delenv("STATEOPS_SPARK_MASTER", raising=False)
    monkeypatch.delenv("STATEOPS_SPARK_CONF", raising=False)
    conf = spark_conf(SparkSettings.from_env())
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert int(conf["spark.sql.shuffle.partitions"]) < 200
    assert conf["spark.pyspark.python"] == worker_python("local[*]") != sys.executable  # the launcher
    assert "spark.jars.packages" not in conf


def test_master_and_extra_conf_from_env(monkeypatch):
    monkeypatch.setenv("STATEOPS_SPARK_MASTER", "spark://head:7077")
    monkeypatch.setenv("STATEOPS_SPARK_CONF", '{"spark.executor.memory": "4g"}')
    conf = spark_conf(SparkSettings.from_env())
    assert conf["spark.master"] == "spark://head:7077" and conf["spark.executor.memory"] == "4g"
    assert conf["spark.pyspark.python"] == sys.executable  # the executors' machines: their own interpreter


@pytest.mark.parametrize("raw,words", [("{oops", "not valid JSON"), ("[1]", "not a JSON object")])
def test_bad_extra_conf(monkeypatch, raw, words):
    monkeypatch.setenv("STATEOPS_SPARK_CONF", raw)
    with pytest.raises(ConfigError, match=words):
        SparkSettings.from_env()


def test_jar_downloads_are_refused():
    with pytest.raises(ConfigError) as err:
        spark_conf(SparkSettings(extra_conf={"spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"}))
    assert err.value.field == "STATEOPS_SPARK_CONF.spark.jars.packages"


def test_delta_jvm_only_when_jars_are_present(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    none = SparkSettings(jars=JarsFolder(str(tmp_path / "no-jars"), "default"))
    assert not delta_jars_on_classpath({})
    assert "spark.sql.extensions" not in spark_conf(none)
    with pytest.raises(ConfigError) as err:  # Delta's Spark writer asked for, its jars absent
        spark_conf(SparkSettings(jars=none.jars, delta_writer="spark"))
    assert err.value.field == "STATEOPS_DELTA_WRITER" and "stateops jars fetch" in str(err.value)
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "delta-spark_2.13-4.0.0.jar").write_bytes(b"")
    assert delta_jars_on_classpath({})
    assert spark_conf(none)["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"


def test_the_fetched_jars_go_first_in_spark_jars_once_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    folder = JarsFolder(str(tmp_path / "fetched"), "STATEOPS_JARS")
    names = fetched_jars(folder.path, stamp=False)
    settings = SparkSettings(jars=folder, extra_conf={"spark.jars": "/opt/mine.jar"})
    assert spark_conf(settings)["spark.jars"] == f"{FENCE_JAR},/opt/mine.jar"  # a copy without its stamp is unfinished
    fetched_jars(folder.path, coordinates="of another StateOps")
    assert spark_conf(settings)["spark.jars"] == f"{FENCE_JAR},/opt/mine.jar"  # fetched for other coordinates: not used
    fetched_jars(folder.path)
    conf = spark_conf(SparkSettings(jars=folder, extra_conf={"spark.jars": "/opt/mine.jar"}, delta_writer="spark"))
    assert conf["spark.jars"].split(",") == [str(tmp_path / "fetched" / name) for name in names] + [FENCE_JAR,
                                                                                                    "/opt/mine.jar"]
    assert conf["spark.stateops.deltaWriter"] == "spark"
    monkeypatch.setenv("STATEOPS_DELTA_WRITER", "jvm")
    with pytest.raises(ConfigError) as err:
        SparkSettings.from_env()
    assert err.value.field == "STATEOPS_DELTA_WRITER" and "auto, delta-rs, spark" in str(err.value)


def test_auto_writes_with_delta_rs_on_a_local_master_and_with_spark_on_a_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    folder = JarsFolder(str(tmp_path / "fetched"), "STATEOPS_JARS")
    assert SparkSettings().delta_writer == "auto"
    cluster = SparkSettings(master="spark://host:7077", jars=folder)
    assert spark_conf(cluster)["spark.stateops.deltaWriter"] == "delta-rs"  # no delta-spark jars: said so
    assert "delta-spark jars are not on the classpath" in cluster.writer_in_force(False)[1]
    fetched_jars(folder.path)
    assert spark_conf(cluster)["spark.stateops.deltaWriter"] == "spark"
    assert cluster.writer_in_force(True) == ("spark", "auto: cluster master spark://host:7077")
    local = SparkSettings(master="local[2]", jars=folder)
    assert spark_conf(local)["spark.stateops.deltaWriter"] == "delta-rs"
    assert local.writer_in_force(True) == ("delta-rs", "auto: local master local[2]")
    chosen = SparkSettings(master="local[2]", jars=folder, delta_writer="spark")
    assert spark_conf(chosen)["spark.stateops.deltaWriter"] == "spark"
    assert chosen.writer_in_force(True) == ("spark", "STATEOPS_DELTA_WRITER=spark")
    monkeypatch.setenv("STATEOPS_DELTA_WRITER", "delta-rs")
    assert SparkSettings.from_env().writer_in_force(True)[0] == "delta-rs"


def test_commit_points_are_create_once_and_the_user_can_say_otherwise(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    bare = spark_conf(SparkSettings(jars=JarsFolder(str(tmp_path / "no-jars"), "default")))
    assert bare["spark.jars"] == FENCE_JAR, "shipped in the package: on the classpath without the fetched jars"
    assert bare["spark.sql.streaming.checkpointFileManagerClass"] == CHECKPOINT_FILE_MANAGER
    assert not [key for key in bare if key.startswith("spark.delta.logStore.")], "no Delta jars: no log store"
    folder = JarsFolder(str(tmp_path / "fetched"), "STATEOPS_JARS")
    fetched_jars(folder.path)
    conf = spark_conf(SparkSettings(master="local[2]", jars=folder))
    assert FENCE_JAR in conf["spark.jars"].split(",")
    assert conf["spark.sql.streaming.checkpointFileManagerClass"] == "io.stateops.fence.CreateOnceCheckpointFileManager"
    assert {scheme: conf[f"spark.delta.logStore.{scheme}.impl"] for scheme in ("file", "s3a", "s3")} == dict.fromkeys(
        ("file", "s3a", "s3"), "io.stateops.fence.CreateOnceLogStore")
    assert conf["spark.databricks.delta.snapshotPartitions"] == "1"
    stock = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    mine = {"spark.sql.streaming.checkpointFileManagerClass": stock,
            "spark.delta.logStore.file.impl": "io.delta.storage.LocalLogStore"}
    conf = spark_conf(SparkSettings(jars=folder, extra_conf=mine))
    assert {key: conf[key] for key in mine} == mine
    assert conf["spark.delta.logStore.s3a.impl"] == LOG_STORE


def test_the_shipped_jar_holds_the_classes_the_settings_name():
    with zipfile.ZipFile(FENCE_JAR) as jar:
        names = set(jar.namelist())
    for cls in (CHECKPOINT_FILE_MANAGER, LOG_STORE):
        assert cls.replace(".", "/") + ".class" in names


@pytest.mark.parametrize("key,value", [
    ("spark.jars", "https://repo1.maven.org/maven2/io/delta/delta-spark_2.13/4.0.0/delta-spark_2.13-4.0.0.jar"),
    ("spark.jars", "/opt/jars/local.jar,http://example.com/x.jar"),
    ("spark.jars", "ftp://example.com/x.jar"),
    ("spark.jars", "ivy://io.delta:delta-spark_2.13:4.0.0"),
    ("spark.jars", "io.delta:delta-spark_2.13:4.0.0"),
    ("spark.files", "https://example.com/lookup.csv"),
    ("spark.archives", "HTTPS://example.com/env.tar.gz#env"),
])
def test_urls_that_download_at_session_start_are_refused(key, value):
    with pytest.raises(ConfigError) as err:
        spark_conf(SparkSettings(extra_conf={key: value}))
    assert err.value.field == f"STATEOPS_SPARK_CONF.{key}"
    assert "would be downloaded at session start" in str(err.value) and "Fix:" in str(err.value)


def test_local_and_cluster_storage_jars_are_accepted():
    jars = "/opt/jars/a.jar,file:/opt/jars/b.jar,local:/opt/jars/c.jar,hdfs://nn/jars/d.jar,s3a://b/e.jar"
    conf = spark_conf(SparkSettings(extra_conf={"spark.jars": jars}, jars=JarsFolder("/nonexistent", "default")))
    assert conf["spark.jars"] == f"{FENCE_JAR},{jars}"


def test_the_jobs_queries_have_a_pool_that_gets_cores_first(monkeypatch):
    import xml.etree.ElementTree as ET

    monkeypatch.delenv("STATEOPS_SPARK_CONF", raising=False)
    conf = spark_conf(SparkSettings.from_env())
    assert conf["spark.scheduler.mode"] == "FAIR"
    pools = {p.get("name"): int(p.findtext("minShare")) for p in ET.parse(conf["spark.scheduler.allocation.file"]).iter("pool")}
    assert pools == {"stateful": pools["stateful"]} and pools["stateful"] > 1000
    monkeypatch.setenv("STATEOPS_SPARK_CONF", '{"spark.scheduler.mode": "FIFO"}')
    assert spark_conf(SparkSettings.from_env())["spark.scheduler.mode"] == "FIFO"  # a user's choice wins


def test_s3a_settings_come_from_the_aws_sdk_variables(monkeypatch):
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret",
           "AWS_REGION": "eu-west-1"}
    conf = s3a_conf(env)
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"  # s3:// URLs through S3A
    assert (conf["spark.hadoop.fs.s3a.endpoint"], conf["spark.hadoop.fs.s3a.path.style.access"],
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"]) == ("http://127.0.0.1:9000", "true", "false")
    assert (conf["spark.hadoop.fs.s3a.access.key"], conf["spark.hadoop.fs.s3a.secret.key"],
            conf["spark.hadoop.fs.s3a.endpoint.region"]) == ("key", "secret", "eu-west-1")
    assert "spark.hadoop.fs.s3a.session.token" not in conf
    temporary = s3a_conf({**env, "AWS_SESSION_TOKEN": "token"})
    assert temporary["spark.hadoop.fs.s3a.session.token"] == "token"
    assert temporary["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert s3a_conf({}) == {}, "no AWS variables: no S3A settings"
    assert "spark.hadoop.fs.s3a.endpoint" not in s3a_conf({"AWS_REGION": "us-east-1"}), "AWS itself: no endpoint"

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("STATEOPS_SPARK_CONF", '{"spark.hadoop.fs.s3a.path.style.access": "false"}')
    merged = spark_conf(SparkSettings.from_env())
    assert merged["spark.hadoop.fs.s3a.path.style.access"] == "false", "STATEOPS_SPARK_CONF wins"
    assert merged["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"


def test_the_consoles_log_is_local_whatever_the_home(monkeypatch, tmp_path):
    """A JVM appends its console output to a local file: the run's log itself on local disk, a file of the same
    path under the per-user cache for a home on object storage (the terminal keeps only StateOps' own lines)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert console_log_for("/home/u/stateops/ops/j/logs/r.log") == "/home/u/stateops/ops/j/logs/r.log"
    assert console_log_for("file:///srv/home/ops/j/logs/r.log") == "/srv/home/ops/j/logs/r.log"
    assert console_log_for("s3://bucket/home/ops/j/logs/r.log") == \
        str(tmp_path / "cache" / "stateops" / "logs" / "s3" / "bucket" / "home" / "ops" / "j" / "logs" / "r.log")
