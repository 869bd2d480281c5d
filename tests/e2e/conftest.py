"""Fixtures of the end-to-end suites on object storage."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def s3_env():
    """moto's S3 server for the module (tests/s3_server.py): the AWS_* environment that points clients at it."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed: the S3 suites need its server")
    from tests.s3_server import moto_s3

    with moto_s3() as env:
        yield env
