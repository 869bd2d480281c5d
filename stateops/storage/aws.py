"""One mapping from the AWS SDK's standard variables to every client of a bucket, so one environment serves
them all: s3fs (botocore reads the variables itself), delta-rs (`delta_rs_options`) and Spark's S3A
(`s3a_conf`). The variables: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_REGION (else AWS_DEFAULT_REGION). STATEOPS_STORAGE_OPTIONS, a JSON object of further delta-rs options, wins
over the environment for delta-rs.
"""
from __future__ import annotations

import json
import os
from typing import Mapping

from stateops.environment import text
from stateops.errors import ConfigError
from stateops.storage.paths import S3, kind
from stateops.storage.timeouts import delta_rs_options

VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION")


def aws_settings(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The AWS variables set in `env` (default: the process environment), AWS_REGION falling back to
    AWS_DEFAULT_REGION as the SDKs do."""
    env = os.environ if env is None else env
    found = {name: env[name] for name in VARIABLES if env.get(name)}
    if "AWS_REGION" not in found and env.get("AWS_DEFAULT_REGION"):
        found["AWS_REGION"] = env["AWS_DEFAULT_REGION"]
    return found


def extra_storage_options() -> dict[str, str]:
    raw = text("STATEOPS_STORAGE_OPTIONS") or ""
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except ValueError as err:
        raise ConfigError("STATEOPS_STORAGE_OPTIONS", f"is not JSON ({err})",
                          'write a JSON object of delta-rs storage options, e.g. {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}') from None
    if not isinstance(options, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
        raise ConfigError("STATEOPS_STORAGE_OPTIONS", "is not an object of text values",
                          'write e.g. {"AWS_REGION": "eu-west-1"} (every value in quotes)')
    return options


def storage_options(uri: str) -> dict[str, str] | None:
    """delta-rs storage options for `uri`: on S3 the call bound (timeouts.py) and the AWS variables (plus
    AWS_ALLOW_HTTP for an http:// endpoint, e.g. a test server on loopback), then STATEOPS_STORAGE_OPTIONS."""
    options: dict[str, str] = {}
    if kind(uri) == S3:
        options = {**delta_rs_options(), **aws_settings()}
        if options.get("AWS_ENDPOINT_URL", "").startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    options.update(extra_storage_options())
    return options or None


def s3a_conf(env: Mapping[str, str]) -> dict[str, str]:
    """Spark's S3A settings from the same variables. `s3://` is served by S3A too (fs.s3.impl): the home's URL
    is the same in every client (s3a:// works as well). Credentials go into the Hadoop configuration, not only
    the driver's environment, because executors on a cluster do not inherit it (Spark redacts *.access.key /
    *.secret.key / *token in its UI and logs). A custom endpoint (a local S3 server, MinIO) gets path-style
    access, which such servers need; set `spark.hadoop.fs.s3a.path.style.access` in STATEOPS_SPARK_CONF to
    override."""
    if not any(env.get(name) for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_REGION")):
        return {}  # AWS itself with credentials from elsewhere (an instance profile): S3A's own defaults
    aws = aws_settings(env)
    prefix = "spark.hadoop.fs.s3a."
    conf = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
    endpoint = aws.get("AWS_ENDPOINT_URL")
    if endpoint:
        conf[prefix + "endpoint"] = endpoint
        conf[prefix + "path.style.access"] = "true"
        conf[prefix + "connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    if aws.get("AWS_REGION"):
        conf[prefix + "endpoint.region"] = aws["AWS_REGION"]
    if aws.get("AWS_ACCESS_KEY_ID") and aws.get("AWS_SECRET_ACCESS_KEY"):
        conf[prefix + "access.key"] = aws["AWS_ACCESS_KEY_ID"]
        conf[prefix + "secret.key"] = aws["AWS_SECRET_ACCESS_KEY"]
        if aws.get("AWS_SESSION_TOKEN"):
            conf[prefix + "session.token"] = aws["AWS_SESSION_TOKEN"]
            conf[prefix + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    return conf
