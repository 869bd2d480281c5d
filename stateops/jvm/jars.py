"""The JVM jars StateOps adds to pyspark's own: Delta's Spark writer, the Kafka connector and S3A (pom.xml beside this
file), shipped in the wheel as coordinates plus the sha256 of every jar they resolve to (jars.sha256), so that an
installed StateOps gets them with no repository: `stateops jars fetch [--dest DIR]`.

Fetched with Maven (which honours the user's ~/.m2/settings.xml mirrors and proxies, where Spark's Ivy at session
start would not) into a folder beside the destination, every jar checked against jars.sha256 (none missing, none
extra, none changed), then moved into place with a stamp; a folder without the stamp, or with the stamp of other
coordinates, is never used. Sessions find the jars through STATEOPS_JARS (a folder), by default a per-user cache
folder keyed by the coordinates' hash, so two StateOps versions on one machine never share a folder.

Standard library only: `bash scripts/setup` runs this module (`python -m stateops.jvm`) with the base interpreter
while the virtual environment installs, the same function `stateops jars fetch` calls.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Callable, Mapping

from stateops.errors import OperationFailed, StateOpsError

HERE = os.path.dirname(os.path.abspath(__file__))
POM = os.path.join(HERE, "pom.xml")
CHECKSUMS = os.path.join(HERE, "jars.sha256")
STAMP = ".stateops-jars.json"
VARIABLE = "STATEOPS_JARS"
COPY = "org.apache.maven.plugins:maven-dependency-plugin:3.11.0:copy-dependencies"
NO_MAVEN = ("Maven (mvn) is needed to fetch StateOps' JVM jars (Delta's Spark writer, the Kafka connector, S3A) and "
            "was not found: install Maven 3.8+ (Debian/Ubuntu: sudo apt-get install -y maven; macOS: brew install "
            "maven) and run `stateops jars fetch` again; without them the embedded default (JSON files, delta-rs) "
            "still works")


class MavenMissing(StateOpsError):
    """No `mvn` on this machine: nothing was fetched (exit code 2)."""


class FetchFailed(OperationFailed):
    """Maven failed, or a jar it fetched is not the one pinned: nothing was put in place (exit code 1)."""


def expected() -> dict[str, str]:
    """{jar file name: sha256} of every jar the coordinates resolve to."""
    with open(CHECKSUMS) as handle:
        return {name: digest for digest, name in (line.split() for line in handle if line.strip())}


def coordinates_hash() -> str:
    """One hash of the coordinates and the pinned checksums: what a folder of jars was fetched for."""
    digest = hashlib.sha256()
    for path in (POM, CHECKSUMS):
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()


def default_folder(env: Mapping[str, str] | None = None) -> str:
    """The per-user cache folder of these coordinates: $XDG_CACHE_HOME (else ~/.cache)/stateops/jars/<hash>."""
    env = os.environ if env is None else env
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "stateops", "jars", coordinates_hash()[:16])


@dataclass(frozen=True)
class JarsFolder:
    """Where sessions look for the jars, and why there."""

    path: str
    source: str  # "STATEOPS_JARS" or "default"

    @classmethod
    def of(cls, env: Mapping[str, str] | None = None) -> "JarsFolder":
        env = os.environ if env is None else env
        chosen = (env.get(VARIABLE) or "").strip()
        return cls(os.path.abspath(os.path.expanduser(chosen)), VARIABLE) if chosen else cls(default_folder(env),
                                                                                             "default")

    def stamp(self) -> dict | None:
        try:
            with open(os.path.join(self.path, STAMP)) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    def jars(self) -> list[str]:
        """The jars to put on the classpath: every pinned jar, when the folder was fetched for these coordinates
        (its stamp says so); none otherwise."""
        stamp = self.stamp()
        if not stamp or stamp.get("coordinates") != coordinates_hash():
            return []
        return [os.path.join(self.path, name) for name in sorted(expected())]

    def describe(self) -> dict:
        """Where the jars come from, for `stateops jobs describe`."""
        stamp = self.stamp()
        status = ("fetched" if stamp and stamp.get("coordinates") == coordinates_hash() else
                  "fetched for other coordinates (another StateOps version)" if stamp else "not fetched")
        out = {"folder": self.path, "source": (f"{VARIABLE}" if self.source == VARIABLE else
                                               "default: the per-user cache folder of these coordinates"),
               "status": status}
        if stamp:
            out.update({key: stamp.get(key) for key in ("fetched_at", "maven", "jars")})
        if status != "fetched":
            dest = "" if self.source == "default" else f" --dest {self.path}"
            out["fix"] = f"stateops jars fetch{dest}"
        return out


def verify(folder: str) -> list[str]:
    """What differs between `folder`'s jars and the pinned ones, one phrase each (empty: they are the same)."""
    want = expected()
    found = {name for name in os.listdir(folder) if name.endswith(".jar")}
    problems = [f"{name} missing" for name in sorted(set(want) - found)]
    problems += [f"{name} not pinned" for name in sorted(found - set(want))]
    for name in sorted(found & set(want)):
        if _sha256(os.path.join(folder, name)) != want[name]:
            problems.append(f"{name} has another sha256 than pinned")
    return problems


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _maven_version(mvn: str) -> str:
    done = subprocess.run([mvn, "-v"], capture_output=True, text=True, timeout=120)
    return (done.stdout.splitlines() or ["unknown"])[0].strip()


def fetch(dest: str, echo: Callable[[str], None] = lambda line: None) -> dict:
    """The pinned jars in `dest`, fetched with Maven and verified unless already there; returns the folder's stamp.
    Nothing replaces `dest` unless every jar is the pinned one."""
    folder = JarsFolder(os.path.abspath(dest), VARIABLE)
    if folder.jars() and not verify(folder.path):
        return {**folder.stamp(), "folder": folder.path, "fetched": False}
    if os.path.isdir(folder.path) and os.listdir(folder.path) and folder.stamp() is None:
        raise StateOpsError(f"{folder.path} holds files that are not StateOps' jars; nothing was fetched. Fix: "
                            "choose a new or empty folder for --dest (or STATEOPS_JARS)")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenMissing(NO_MAVEN)
    parent = os.path.dirname(folder.path)
    os.makedirs(parent, exist_ok=True)
    echo(f"fetching {len(expected())} pinned jars with Maven into {folder.path}")
    with tempfile.TemporaryDirectory(prefix=".stateops-jars-", dir=parent) as work:
        partial, pom = os.path.join(work, "jars"), os.path.join(work, "pom.xml")
        shutil.copyfile(POM, pom)  # Maven may write beside its pom; the installed package may be read-only
        done = subprocess.run([mvn, "-B", "-q", "-f", pom, COPY, "-DincludeScope=runtime",
                               f"-DoutputDirectory={partial}"], capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
            raise FetchFailed(f"Maven could not fetch the jars (exit {done.returncode}: {tail}). Fix: check that "
                              "Maven Central, or the mirror in your ~/.m2/settings.xml, is reachable, then run "
                              "`stateops jars fetch` again")
        problems = verify(partial)
        if problems:
            raise FetchFailed(f"the jars Maven fetched are not the pinned ones ({'; '.join(problems[:3])}"
                              f"{'; ...' if len(problems) > 3 else ''}); nothing was put in {folder.path}. Fix: "
                              "check your Maven mirror serves Maven Central's artifacts unchanged")
        stamp = {"coordinates": coordinates_hash(), "jars": len(expected()), "maven": _maven_version(mvn),
                 "fetched_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        with open(os.path.join(partial, STAMP), "w") as handle:
            json.dump(stamp, handle, indent=2)
        if os.path.lexists(folder.path):  # empty, or jars of ours (other coordinates, or changed since)
            os.replace(folder.path, os.path.join(work, "replaced"))  # removed with the work folder
        os.replace(partial, folder.path)
    return {**stamp, "folder": folder.path, "fetched": True}


def summary(done: dict) -> str:
    """The line a fetch ends with: how many jars, where, and how sessions find them."""
    how = ("sessions use them by default" if done["folder"] == default_folder() else
           f"sessions use them with {VARIABLE}={done['folder']}")
    return (f"{done['jars']} jars {'fetched and verified' if done['fetched'] else 'already there, verified'} in "
            f"{done['folder']} ({how})")
