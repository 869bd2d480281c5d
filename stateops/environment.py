"""Numeric settings from environment variables, each refused by name when it is not a number."""
from __future__ import annotations

import os
from typing import Mapping

from stateops.errors import ConfigError


def from_env(variables: Mapping[str, str], integers: tuple[str, ...] = ()) -> dict[str, float | int]:
    """field -> value for every variable of `variables` (field -> variable name) that is set; `integers` are
    whole numbers, the rest decimals."""
    values: dict[str, float | int] = {}
    for name, variable in variables.items():
        raw = os.environ.get(variable, "").strip()
        if not raw:
            continue
        try:
            values[name] = int(raw) if name in integers else float(raw)
        except ValueError:
            raise ConfigError(variable, f"{raw!r} is not a {'whole ' if name in integers else ''}number",
                              "use a number, e.g. 10") from None
    return values
