"""A throwaway PostgreSQL server on loopback from Debian's `postgresql` package: `initdb` + `pg_ctl` in a
temporary directory, trust authentication, no fsync. PostgreSQL refuses to run as root, so under root the
server runs as `nobody` (runuser or setpriv) in a directory that user owns.
"""
from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from typing import Iterator

from tests.support.servers.ports import free_port


def bin_dir() -> str | None:
    """Where initdb and pg_ctl are: PATH first, then the newest /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return os.path.dirname(found)
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(versions[-1]) if versions else None


def unprivileged_prefix() -> list[str] | None:
    """The command prefix that runs a program as `nobody` when this process is root ([] when it is not);
    None when root has no way to drop privileges here."""
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"]
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
    return None


def skip_reason() -> str | None:
    if bin_dir() is None:
        return ("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's `postgresql` package "
                "(bash scripts/setup does so as root with apt)")
    if unprivileged_prefix() is None:
        return "running as root without runuser or setpriv: PostgreSQL refuses to run as root"
    return None


@contextlib.contextmanager
def postgres_server(timeout: int = 180) -> Iterator[str]:
    """Start a server; yield its URL (`postgresql://postgres@127.0.0.1:PORT/postgres`); stop and delete it."""
    binaries, prefix = bin_dir(), unprivileged_prefix()
    root = tempfile.mkdtemp(prefix="stateops-pg-")  # not under pytest's root-only tmp dirs: nobody must enter
    if prefix:
        user = pwd.getpwnam("nobody")
        os.chown(root, user.pw_uid, user.pw_gid)
    data, port = os.path.join(root, "data"), free_port()

    def run(*args: str) -> None:
        proc = subprocess.run(prefix + [os.path.join(binaries, args[0]), *args[1:]], capture_output=True,
                              text=True, timeout=timeout, cwd=root)
        if proc.returncode:
            raise RuntimeError(f"{args[0]} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")

    try:
        run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        run("pg_ctl", "-D", data, "-l", os.path.join(root, "server.log"), "-w", "-t", str(timeout), "-o",
            f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off", "start")
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)
