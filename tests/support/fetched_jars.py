"""A folder that looks to sessions as `stateops jars fetch` leaves it (the pinned jars' names, empty files), for
tests of what the session factory and `jobs describe` make of it without Maven."""
from __future__ import annotations

import json
import os

from stateops.jvm.jars import STAMP, coordinates_hash, expected


def fetched_jars(folder: str, stamp: bool = True, coordinates: str | None = None) -> list[str]:
    """Empty files named as the pinned jars in `folder`, with the fetch's stamp for `coordinates` (default: these)
    unless `stamp` is False; returns the jar names, sorted."""
    os.makedirs(folder, exist_ok=True)
    names = sorted(expected())
    for name in names:
        open(os.path.join(folder, name), "wb").close()
    if stamp:
        with open(os.path.join(folder, STAMP), "w") as handle:
            json.dump({"coordinates": coordinates or coordinates_hash(), "jars": len(names)}, handle)
    return names
