"""StateOps installed at an end of its version ranges (tests/e2e/test_install_ends.py): the wheel of this tree in a
fresh virtual environment whose every package uv resolved from the package index, to the highest or to the lowest
versions pyproject.toml allows (`lowest-direct`: every direct dependency at its lower bound)."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from tests.support.wheel_env import clean_env

UV = os.path.join(os.path.dirname(sys.executable), "uv")
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
# end -> (uv's resolution, the extras installed): the highest with `dg` only (the Kafka and S3 extras missing, so
# their refusals are tested), the lowest with every extra (their lower bounds installed too).
ENDS = {"highest": ("highest", ("dg",)), "lowest": ("lowest-direct", ("all",))}


def _requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(name).decode().splitlines()
    return [Requirement(line.split(":", 1)[1].strip()) for line in lines if line.startswith("Requires-Dist:")]


def direct_requirements(wheel: Path, extras: tuple[str, ...]) -> list[str]:
    """The wheel's own requirements with `extras` (an extra naming other extras of StateOps expanded), as text."""
    requires, chosen, wanted = _requires(wheel), set(), list(extras)
    while wanted:
        extra = wanted.pop()
        chosen.add(extra)
        for req in requires:
            if req.marker and req.marker.evaluate({"extra": extra}) and req.name == "stateops":
                wanted.extend(e for e in req.extras if e not in chosen)
    return [f"{req.name}{req.specifier}" for req in requires if req.name != "stateops" and
            (req.marker is None or any(req.marker.evaluate({"extra": e}) for e in chosen))]


def uv(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    done = subprocess.run([UV, *args], capture_output=True, text=True, timeout=timeout,
                          env=clean_env(UV_PYTHON=BASE_PYTHON))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def resolve(requirements: list[str], resolution: str, folder: Path) -> dict[str, str]:
    """{package: version} uv resolves `requirements` to, for Python 3.11, from the package index (the pins are left in
    `folder`/requirements.txt)."""
    wanted, pins = folder / "requirements.in", folder / "requirements.txt"
    wanted.write_text("\n".join(requirements) + "\n")
    uv("pip", "compile", "-q", "--resolution", resolution, "--python-version", "3.11", str(wanted), "-o", str(pins))
    return {line.split("==")[0].lower(): line.split("==")[1].split()[0]
            for line in pins.read_text().splitlines() if "==" in line and not line.startswith("#")}


@dataclass
class Installed:
    end: str
    python: Path
    versions: dict[str, str]      # every package installed, as resolved
    lower_bounds: dict[str, str]  # each direct dependency's lower bound

    @property
    def stateops(self) -> str:
        return str(self.python.parent / "stateops")


def install_at(end: str, wheel: Path, root: Path) -> Installed:
    """A new venv under `root` with `wheel` and its dependencies resolved to `end` (ENDS)."""
    resolution, extras = ENDS[end]
    requirements = direct_requirements(wheel, extras)
    versions = resolve(requirements, resolution, root)
    uv("venv", "-q", str(root / "venv"))
    python = root / "venv" / "bin" / "python"
    uv("pip", "install", "-q", "--python", str(python), "-r", str(root / "requirements.txt"))
    uv("pip", "install", "-q", "--python", str(python), "--no-deps", str(wheel))
    uv("pip", "check", "--python", str(python))
    bounds = {Requirement(r).name.lower(): next(s.version for s in Requirement(r).specifier if s.operator == ">=")
              for r in requirements}
    return Installed(end, python, versions, bounds)
