"""Secrets by reference: `${env:NAME}` in a configured string stands for the environment variable NAME.

It is Kafka's own config-provider syntax (EnvVarConfigProvider), so a value copied from a Kafka client's
properties reads the same here, e.g.

    kafka_options = { "kafka.sasl.jaas.config" = 'org.apache.kafka.common.security.plain.PlainLoginModule
                      required username="u" password="${env:KAFKA_PASSWORD}";' }   (one line in the file)

A reference may be the whole value or part of a longer one. The configuration keeps the reference (what
`stateops jobs describe` and the Dagster definitions show); an entry point that starts a run, an audit or a
runbook resolves it (stateops.jobs.definition.spec.resolved), and every value it resolves is registered with
stateops.redaction, so it is masked wherever StateOps writes output. A variable that is not set is refused
then, naming the configured key and the variable: a secret missing from the environment never becomes an
empty string that fails later, far from its cause.
"""
from __future__ import annotations

import os
import re
from typing import Any, Mapping

from stateops import redaction
from stateops.errors import ConfigError

REFERENCE = re.compile(r"\$\{env:([^}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def holds_reference(value: Any) -> bool:
    """True when `value` (a string, or a mapping, list or tuple holding strings at any depth) holds a reference."""
    if isinstance(value, str):
        return REFERENCE.search(value) is not None
    if isinstance(value, Mapping):
        return any(holds_reference(v) for v in value.values())
    if type(value) in (list, tuple):
        return any(holds_reference(v) for v in value)
    return False


def resolve_text(text: str, key: str, env: Mapping[str, str]) -> str:
    """`text` with each reference replaced by its variable's value, registered for redaction; ConfigError
    naming `key` and the variable when it is not set, or when the reference names no variable."""
    def value_of(match: re.Match) -> str:
        name = match.group(1)
        if not _NAME.match(name):
            raise ConfigError(key, f"{match.group(0)!r} is not a reference to an environment variable",
                              "write ${env:NAME} with NAME a variable name (letters, digits, underscores)")
        if name not in env:
            raise ConfigError(key, f"refers to ${{env:{name}}}, and the environment variable {name} is not set",
                              f"set {name} in the environment of the run, audit or runbook (or write the value "
                              "in the config file)")
        redaction.register(env[name], name)
        return env[name]

    return REFERENCE.sub(value_of, text)


def resolve(value: Any, key: str, env: Mapping[str, str] | None = None) -> Any:
    """`value` with every reference in its strings resolved (see resolve_text), at any depth of mappings,
    lists and tuples; each string's key is `key` joined with the mapping keys on its way (list items by
    position), e.g. jobs.user_activity.kafka_options.kafka.sasl.jaas.config. Other values are left as they are.
    `env`: default the process environment, read now."""
    env = os.environ if env is None else env
    if isinstance(value, str):
        return resolve_text(value, key, env)
    if isinstance(value, Mapping):
        return {k: resolve(v, f"{key}.{k}", env) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(resolve(v, f"{key}.{i}", env) for i, v in enumerate(value))
    return value


def checked_before_resolving(err: ConfigError) -> ConfigError:
    """A load's refusal of a value that is a reference outside the job tables (the sensors and retention read
    those settings, and resolve nothing), saying so, with what to do; any other refusal as it is."""
    if not REFERENCE.search(err.problem):
        return err
    return ConfigError(err.field, f"{err.problem}: a ${{env:NAME}} reference is resolved for a job's own settings "
                       "(`[jobs.NAME]`) when a run, an audit or a runbook starts, not in this table",
                       "write the value itself here")
