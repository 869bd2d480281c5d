"""Every STATEOPS_* environment variable is read here, one way: blank means unset, a number that does not parse
or lies out of bounds is a ConfigError naming the variable and the fix. Subsystems keep their own typed
settings (stateops.control.settings, stateops.recovery.settings, the progress buffer, the webhook, the Spark
session) and build them from these readers; an entry point reads them once and passes them down.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from stateops.errors import ConfigError

HOME, CONTROL_HOME, CONFIG = "STATEOPS_HOME", "STATEOPS_CONTROL_HOME", "STATEOPS_CONFIG"


def text(variable: str) -> str | None:
    """The variable's value, None when unset or blank."""
    return os.environ.get(variable, "").strip() or None


def numbers(variables: Mapping[str, str], integers: tuple[str, ...] = (),
            minimum: Mapping[str, float] | None = None, above: tuple[str, ...] = ()) -> dict[str, float | int]:
    """field -> value for every variable of `variables` (field -> variable name) that is set; `integers` are
    whole numbers, the rest decimals; each at least `minimum[field]` (default 0), strictly more for `above`."""
    values: dict[str, float | int] = {}
    for name, variable in variables.items():
        raw = text(variable)
        if raw is None:
            continue
        whole = name in integers
        floor = (minimum or {}).get(name, 0)
        words = f"a {'whole ' if whole else ''}number " + (f"above {floor:g}" if name in above else f"of {floor:g} or more")
        try:
            value = int(raw) if whole else float(raw)
        except ValueError:
            raise ConfigError(variable, f"{raw!r} is not {words}", f"use e.g. {int(floor) + 10}") from None
        if value < floor or (name in above and value == floor):
            raise ConfigError(variable, f"{raw!r} is not {words}", f"use e.g. {int(floor) + 10}")
        values[name] = value
    return values


@dataclass(frozen=True)
class Locations:
    """Where StateOps keeps things and which config file it reads: STATEOPS_HOME (default ./.stateops),
    STATEOPS_CONTROL_HOME (default: the home), STATEOPS_CONFIG (default: none)."""

    home: str | None
    control_home: str | None
    config_path: str | None

    @classmethod
    def read(cls) -> "Locations":
        return cls(text(HOME), text(CONTROL_HOME), text(CONFIG))
