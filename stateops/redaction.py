"""The one redaction of credentials from everything StateOps writes: CLI output, run logs and Spark's console
output, error lines, ops tables, runbook journals and archive manifests, Dagster metadata and logs.

What is masked, wherever it appears in a text:
- known secret values: every value resolved from a `${env:NAME}` reference (stateops.references registers
  it) and the SECRET_VARIABLES (the AWS SDK's secrets, and the alert webhook's URL, whose path is its
  credential; read when redacting, so no entry point has to remember them), each replaced by
  `[redacted: ${env:NAME}]` (which secret, never its value); values shorter than MIN_LENGTH characters are not
  masked: they would mask parts of ordinary words and numbers (a test's AWS secret `test` turned the JSON key
  `latest_committed_batch` into nonsense), and a credential that short is no protection anyway;
- the password of a URL (`scheme://user:password@host`: a PostgreSQL URL) and a URL's query parameter named
  like a secret (`?token=...`, `&sig=...`), as `***`;
- a quoted `password="..."` (Kafka's `sasl.jaas.config`, any JAAS entry), as `password="***"`.

`redact_tree` applies `redact` to every string of a structure (metadata, JSON documents) and masks whole
the values whose key looks secret by SECRET_KEYS: Spark's default `spark.redaction.regex` terms plus `sasl`,
`jaas` and `credential`. The session factory gives Spark the same regex (SPARK_REDACTION_REGEX), so Spark's
own UI, event logs and plans mask the settings holding secrets too.
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
from functools import lru_cache
from typing import Any, Callable, Mapping, TextIO

SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|sasl|jaas|credential"
SECRET_KEYS = re.compile(SPARK_REDACTION_REGEX)
SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "STATEOPS_ALERT_WEBHOOK_URL")
MIN_LENGTH = 8
MASK = "***"
# A `${env:NAME}` reference is no secret (it names one): masks skip it, so `jobs describe` shows it.
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@'\"]+:)(?!\$\{env:)([^\s/@'\"]+)(@)")
_QUERY_SECRET = re.compile(
    r"(?i)([?&][^=&\s]*(?:secret|password|token|key|sig)[^=&\s]*=)(?!\[redacted: |\$\{env:)([^&\s'\"]+)")
_QUOTED_PASSWORD = re.compile(r"(?i)(password\s*=\s*\\?[\"'])(?!\[redacted: |\$\{env:)(.*?)(\\?[\"'])")
_known: dict[str, str] = {}  # secret value -> the variable it came from


def register(value: str, name: str) -> None:
    """Mask `value` from now on in this process, naming variable `name` (its JSON-escaped form too: the value
    of a jaas config has quotes, which a JSON document escapes)."""
    if len(value) >= MIN_LENGTH:
        _known[value] = name
        _known[json.dumps(value)[1:-1]] = name


def _secrets() -> dict[str, str]:
    found = {os.environ[name]: name for name in SECRET_VARIABLES if len(os.environ.get(name, "")) >= MIN_LENGTH}
    return {**found, **_known}


@lru_cache(maxsize=8)
def _alternation(values: tuple[str, ...]) -> re.Pattern:
    return re.compile("|".join(re.escape(v) for v in sorted(values, key=len, reverse=True)))


def redact(text: str) -> str:
    """`text` with every known secret value, URL password and quoted password masked (see the module doc)."""
    secrets = _secrets()
    if secrets:
        text = _alternation(tuple(secrets)).sub(lambda m: f"[redacted: ${{env:{secrets[m.group(0)]}}}]", text)
    for pattern in (_URL_PASSWORD, _QUERY_SECRET, _QUOTED_PASSWORD):
        text = pattern.sub(lambda m: m.group(1) + MASK + (m.group(3) if m.re.groups == 3 else ""), text)
    return text


def redact_tree(value: Any) -> Any:
    """`value` with `redact` applied to every string at any depth of mappings, lists and tuples, and the string
    values of keys matching SECRET_KEYS masked whole (Spark's rule for its settings), unless they hold a
    `${env:NAME}` reference: those keep what names the secret, and `redact` masks the rest."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: MASK if isinstance(v, str) and SECRET_KEYS.search(str(k)) and "${env:" not in v
                else redact_tree(v) for k, v in value.items()}
    if type(value) in (list, tuple):  # not a named tuple, whose fields are not a sequence of items
        return type(value)(redact_tree(v) for v in value)
    return value


class RedactingStream:
    """A text stream that redacts what is written to it before `target` gets it: the CLI's stdout and stderr.
    Text only, and no `buffer`, so click writes text through it rather than bytes around it."""

    def __init__(self, target: TextIO):
        self.target = target
        self.encoding, self.errors = getattr(target, "encoding", "utf-8"), getattr(target, "errors", "strict")

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.target.write(redact(text))
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()


def _relay(source: TextIO, target: TextIO) -> None:
    """Copy `source` to `target` line by line, redacted, until every writer closed it, then close both. A line
    that cannot be written is dropped, never left in the pipe: a full pipe would block the writer (the JVM)."""
    with source, target:
        for line in source:
            try:
                target.write(redact(line))
                target.flush()
            except (OSError, ValueError):
                pass


def redact_fd(fd: int, target: TextIO | None = None) -> Callable[[], None]:
    """From now on, what is written to file descriptor `fd` by this process (Python, native code, the JVM and
    every process started meanwhile, which inherit it) reaches `target` (default: where `fd` pointed; closed
    when the last writer is gone) only through a thread that redacts each line. Returns the undo: `fd` points
    where it did before (processes started meanwhile keep writing through the thread)."""
    stream = sys.stderr if fd == 2 else sys.stdout if fd == 1 else None
    if stream is not None:
        stream.flush()
    saved = os.dup(fd)
    read_end, write_end = os.pipe()
    target = target if target is not None else os.fdopen(os.dup(saved), "w")
    relay = threading.Thread(target=_relay, args=(os.fdopen(read_end, errors="replace"), target),
                             name=f"redact-fd-{fd}", daemon=True)
    relay.start()
    os.dup2(write_end, fd)
    os.close(write_end)

    def undo() -> None:
        if stream is not None:
            stream.flush()
        os.dup2(saved, fd)
        os.close(saved)
        relay.join(timeout=0.5)  # the last lines reach `target` before the caller goes on (unless a JVM holds on)

    return undo
