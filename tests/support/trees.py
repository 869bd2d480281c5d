"""Every file under a local root with its sha256: the oracle of "nothing was changed" (refusals, dry runs,
rollbacks, a stopped query's checkpoint)."""
from __future__ import annotations

import hashlib
import os


def file_hashes(root: str, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Path relative to `root` -> sha256, for every file under `root` whose path does not start with one of the
    `skip` prefixes."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if not rel.startswith(skip):
                with open(path, "rb") as handle:
                    found[rel] = hashlib.sha256(handle.read()).hexdigest()
    return found


def object_hashes(url: str) -> dict[str, str]:
    """Key relative to `url` -> sha256, for every object under `url` (s3://...), read afresh through fsspec
    (S3A's directory markers, keys ending in `/`, are no files)."""
    from stateops.storage import filesystem

    fs, base = filesystem(url)
    fs.invalidate_cache()
    return {os.path.relpath(p, base): hashlib.sha256(fs.cat(p)).hexdigest() for p in fs.find(base)
            if not p.endswith("/")}
