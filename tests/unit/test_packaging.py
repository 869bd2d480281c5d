"""What an install puts on the import path, read from pyproject.toml: one top-level name, `stateops`, its packages
listed to the last folder (a package folder missing from the list would be missing from a wheel), each folder
mapped once."""
from __future__ import annotations

import os
import tomllib

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _setuptools() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["tool"]["setuptools"]


def _folder(package: str, mapping: dict[str, str]) -> str:
    """The folder setuptools builds `package` from (the longest mapped prefix wins)."""
    for prefix in sorted(mapping, key=len, reverse=True):
        if package == prefix or package.startswith(prefix + "."):
            return os.path.join(mapping[prefix], *package[len(prefix):].split(".")[1:])
    return os.path.join(*package.split("."))


def test_one_top_level_name_and_every_package_folder_listed():
    tool = _setuptools()
    packages, mapping = tool["packages"], tool["package-dir"]
    assert {p.split(".")[0] for p in packages} == {"stateops"}
    assert len(set(mapping.values())) == len(mapping)
    listed = {os.path.normpath(_folder(p, mapping)) for p in packages}
    on_disk = {os.path.relpath(folder, ROOT) for top in ("stateops", *mapping.values())
               for folder, _dirs, files in os.walk(os.path.join(ROOT, top))
               if "__init__.py" in files and "__pycache__" not in folder}
    assert listed == on_disk
    for package in packages:
        assert os.path.isfile(os.path.join(ROOT, _folder(package, mapping), "__init__.py")), package
