"""How long a call to an object store may take before it fails: a store that accepts connections and never
answers (a hung server, a black-holed network) ends the command in one line (failures.py) within a bound, instead
of the clients' own defaults (botocore retries for minutes, delta-rs for 180 s).

STATEOPS_STORAGE_TIMEOUT_SECONDS (default 30) is one attempt's connect and read timeout; a call makes at most
ATTEMPTS attempts, so it fails after at most ATTEMPTS x the timeout (90 s by default) plus the pauses between them.
Both clients StateOps calls directly get it: s3fs (botocore's Config: connect_timeout, read_timeout, retries; its
own retry loop off, `bounded`) and delta-rs (object_store's timeout, connect_timeout, max_retries,
retry_timeout). Read like the AWS SDK's variables, from the process environment where the client is made: every
client of one process reads the same (stateops/storage/aws.py).
"""
from __future__ import annotations

from typing import Any

from stateops.environment import text
from stateops.errors import ConfigError

VARIABLE = "STATEOPS_STORAGE_TIMEOUT_SECONDS"
DEFAULT_SECONDS = 30.0
ATTEMPTS = 3


def seconds() -> float:
    """One attempt's timeout (the setting, else DEFAULT_SECONDS); a bad value names the variable and the fix."""
    raw = text(VARIABLE)
    if not raw:
        return DEFAULT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ConfigError(VARIABLE, f"{raw!r} is not a positive number of seconds",
                          "write e.g. 30 (one attempt's connect and read timeout; a call tries 3 times)")
    return value


def s3fs_options() -> dict[str, Any]:
    """s3fs's constructor options: botocore's timeouts and attempts."""
    timeout = seconds()
    return {"config_kwargs": {"connect_timeout": timeout, "read_timeout": timeout,
                              "retries": {"max_attempts": ATTEMPTS, "mode": "standard"}}}


def bounded(fs: Any) -> Any:
    """An s3fs filesystem with its own retry loop off (its `retries`, a class attribute, 5: each of its tries would
    make botocore's attempts again); botocore's standard mode retries what is worth retrying, throttling too."""
    fs.retries = 1
    return fs


def delta_rs_options() -> dict[str, str]:
    """delta-rs's storage options for the same bound."""
    timeout = seconds()
    return {"timeout": f"{timeout:g}s", "connect_timeout": f"{timeout:g}s", "max_retries": str(ATTEMPTS - 1),
            "retry_timeout": f"{ATTEMPTS * timeout:g}s"}
