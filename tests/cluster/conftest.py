"""A real Spark standalone cluster (master + two workers, 1 core and 1 GiB each, loopback) per module."""
from __future__ import annotations

import pytest

from tests.spark_cluster import spark_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with spark_cluster(str(tmp_path_factory.mktemp("spark-cluster"))) as started:
        yield started
