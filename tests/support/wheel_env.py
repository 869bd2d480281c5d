"""StateOps as a user installs it: a wheel built from this tree (not editable), in a new virtual environment.

The wheel goes into a venv of the base interpreter with `pip install --no-deps`, so only StateOps' own files are
installed (one import name, `stateops`); its pinned dependencies are then made importable from the project's
.venv by a .pth line, which adds that folder to the path without running its .pth files (so this tree's editable
finder never loads). A full install of the dependencies from the package index takes minutes; what these tests
check is what StateOps installs and how a project imports it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(dest: Path) -> Path:
    """The wheel of this tree (`pip wheel --no-deps`: setuptools builds it as any installer would)."""
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                           "-w", str(dest), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = dest.glob("stateops-*.whl")
    return wheel


def new_venv(where: Path, wheel: Path) -> Path:
    """A venv of the base interpreter with `wheel` installed and the project's dependencies importable; returns its
    python."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(where)], check=True, timeout=300)
    python = where / "bin" / "python"
    # The new venv's own pip (this one's would first uninstall the editable StateOps of the project's .venv).
    done = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "stateops_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def clean_env(**extra: str) -> dict[str, str]:
    """The process environment without this project's variables and paths (a user's shell), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEOPS_", "PYTHON", "DAGSTER_"))
           and k not in ("VIRTUAL_ENV",)}
    return {**env, **extra}


def run_in(python: Path, args: list[str], cwd: Path, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    """`python ARGS` in `cwd` with a user's environment (clean_env) and its Dagster instance under `cwd`."""
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=clean_env(DAGSTER_HOME=str(cwd / "dagster_home"), **env))


def run_dg(python: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`dg ARGS` in the project (its code on the path as an installed project's would be)."""
    return run_in(python, ["-m", "dagster_dg_cli.cli", *args], cwd, COLUMNS="250", STATEOPS_HOME=str(cwd / "home"),
                  PYTHONPATH=str(cwd / "src"))


def dg_project(tmp_path: Path) -> Path:
    """A new dg project, `analytics`, with an empty defs folder (as `dg scaffold project` lays it out)."""
    project = tmp_path / "dg_project"
    package = project / "src" / "analytics"
    (package / "defs").mkdir(parents=True)
    (project / "dagster_home").mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "analytics"\nversion = "0.1.0"\n\n[tool.dg]\n'
                                            'directory_type = "project"\n\n[tool.dg.project]\nroot_module = "analytics"\n')
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(
        "from pathlib import Path\n\nimport dagster as dg\n\n\n@dg.definitions\ndef defs():\n"
        "    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)\n")
    return project
