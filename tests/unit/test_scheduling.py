"""How `scripts/test` spreads the run over its two workers (docs/testing.md): every module is one unit of work on
one worker, so a module-scoped fixture (a server, a scenario, a daemon) is built once and a module's tests that
build on each other run in order. Checked by running pytest-xdist with the exact options `scripts/test` passes on
a few throwaway modules: `--dist loadgroup` silently stopped grouping when pytest 9 renamed the node id
pytest-xdist 3.8 rewrites, and only a run shows that."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODULE = '''
import os
import pytest

@pytest.fixture(scope="module")
def built():
    with open(os.environ["RAN"], "a") as log:
        log.write("built {name} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("n", range(4))
def test_step(built, n):
    with open(os.environ["RAN"], "a") as log:
        log.write("ran {name} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
'''


def _xdist_options() -> list[str]:
    """The `-n ... --dist ...` options of scripts/test's pytest line."""
    with open(os.path.join(ROOT, "scripts", "test")) as handle:
        line = next(line for line in handle if "-m pytest" in line)
    return re.search(r"(-n \d+ --dist \S+(?: --no-loadscope-reorder)?)", line).group(1).split()


def test_every_module_runs_on_one_worker_and_builds_its_module_fixtures_once(tmp_path):
    for name in "abcd":
        (tmp_path / f"test_{name}.py").write_text(MODULE.format(name=name))
    ran = tmp_path / "ran.log"
    done = subprocess.run([sys.executable, "-m", "pytest", *_xdist_options(), "-p", "no:cacheprovider", "-q",
                           str(tmp_path)], cwd=tmp_path, env={**os.environ, "RAN": str(ran)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers, builds = defaultdict(set), defaultdict(int)
    for what, name, worker in (line.split() for line in ran.read_text().splitlines()):
        workers[name].add(worker)
        builds[name] += what == "built"
    assert set(workers) == set("abcd")
    assert {name: len(w) for name, w in workers.items()} == dict.fromkeys("abcd", 1), workers
    assert dict(builds) == dict.fromkeys("abcd", 1), builds
    assert len(set().union(*workers.values())) == 2, "both workers took modules"
