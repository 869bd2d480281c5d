"""Who acts, when the caller does not say (who holds something: stateops.storage.holders)."""
from __future__ import annotations

import getpass
import os

from stateops.storage.holders import HOST


def default_actor() -> str:
    """Who acts, when the caller does not say: user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{HOST}"
