"""The floors of the house, read from the source with `ast` (every import, at module level or inside a
function): the core (`stateops` without the four packages below) imports neither the Spark runtime
(`stateops.jobs`), the CLI (`stateops.cli`), the Dagster code (`stateops.dagster`, `stateops.sensors`) nor Dagster;
`stateops.jobs` imports neither the CLI nor Dagster code; the CLI and the Dagster code are siblings that never
import each other; the sensors are composed by `stateops.dagster` and never import it; no two packages or
subpackages import each other, and no two modules either (directly or round a loop); no code outside the storage
layer (`stateops/storage/`) branches on a storage scheme; and nothing below the entry points reads its settings
from the environment (`from_env()`)."""
from __future__ import annotations

import ast
import os
from collections import defaultdict

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The installed name of each package -> its folder in the repository (pyproject.toml's package-dir).
FOLDERS = {"stateops": "stateops", "stateops.jobs": "jobs", "stateops.dagster": "orchestration",
           "stateops.sensors": "sensors", "stateops.cli": "stateops_cli"}
RUNTIME, DAGSTER_CODE, SENSORS, CLI = "stateops.jobs", "stateops.dagster", "stateops.sensors", "stateops.cli"
LAYERS = (RUNTIME, DAGSTER_CODE, SENSORS, CLI)
DAGSTER = ("dagster", "dagster_pyspark")  # the library (not stateops.dagster)


def _project_files():
    """(module name as installed, path) of every module of the project's packages."""
    for package, folder in FOLDERS.items():
        for where, _dirs, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(where, name)
                    rel = os.path.relpath(path, os.path.join(ROOT, folder))[:-3].replace(os.sep, ".")
                    yield f"{package}.{rel}".removesuffix(".__init__"), path


def _imports(path: str, submodules: set[str] | dict[str, str] = frozenset()) -> set[str]:
    """What `path` imports; `from package import name` counts as `package.name` when that is one of
    `submodules`, else as `package`."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in submodules else node.module
                         for alias in node.names)
    return found


def _modules() -> dict[str, set[str]]:
    """Module name -> the modules it imports, for every module of the project's packages."""
    return {module: _imports(path) for module, path in _project_files()}


def _layer(module: str) -> str:
    """`stateops.jobs`, `stateops.dagster`, `stateops.sensors` or `stateops.cli` for a module of one of them;
    `core` for the rest of stateops; the top-level package of anything else (a library)."""
    for layer in LAYERS:
        if module == layer or module.startswith(layer + "."):
            return layer
    return "core" if module.split(".")[0] == "stateops" else module.split(".")[0]


def _unit(module: str) -> str:
    """The unit a module belongs to: one of the four layers, or in the core one of its subpackages or modules."""
    return ".".join(module.split(".")[:2])


def _importers(graph, of: str, targets: tuple[str, ...]) -> list[str]:
    return sorted(f"{module} imports {imported}" for module, imports in graph.items() if _layer(module) == of
                  for imported in imports if _layer(imported) in targets)


def test_the_core_imports_no_runtime_no_cli_no_dagster_code_and_no_dagster():
    assert _importers(_modules(), "core", (*LAYERS, *DAGSTER)) == []


def test_the_spark_runtime_imports_neither_the_cli_nor_dagster_code():
    assert _importers(_modules(), RUNTIME, (CLI, DAGSTER_CODE, SENSORS, *DAGSTER)) == []


def test_the_cli_and_the_dagster_code_never_import_each_other():
    graph = _modules()
    assert _importers(graph, CLI, (DAGSTER_CODE, SENSORS, *DAGSTER)) == []
    assert _importers(graph, DAGSTER_CODE, (CLI,)) == []
    assert _importers(graph, SENSORS, (CLI,)) == []


def _imported_modules(graph, of: str) -> set[str]:
    return {imported for module, imports in graph.items() if module == of or module.startswith(of + ".")
            for imported in imports}


def test_the_rooms_of_jobs_import_downwards_only():
    """jobs/ holds four rooms: the job definition (no Spark: the CLI's reading commands and the code location's
    load use it alone), the Spark runtime, the built-in examples and the demo's input. The definition imports
    neither the runtime nor Spark; the runtime never imports the examples (they are jobs like any user's); the
    exactly-once sink needs its app id and replay rules (stateops.sinkstate, beside stateops.delta), not the
    runbook that sets them."""
    graph = _modules()
    definition = _imported_modules(graph, "stateops.jobs.definition")
    assert not {m for m in definition if m.split(".")[0] in ("pyspark", "delta") or m.startswith(
        ("stateops.jobs.runtime", "stateops.jobs.demo"))}, sorted(definition)
    runtime = _imported_modules(graph, "stateops.jobs.runtime")
    assert not {m for m in runtime if m.startswith(("stateops.jobs.examples", "stateops.jobs.demo"))}, sorted(runtime)
    sink = _imported_modules(graph, "stateops.jobs.runtime.sink")
    assert "stateops.sinkstate" in sink and not {m for m in sink if m.startswith("stateops.recovery")}


# The core's capabilities, one floor: each stands on the rooms below them (Spark's checkpoint, the storage layer, the
# runbook engine, the control plane and the loose core modules) and imports no other capability, but for the arrows
# listed: remediation decides from the audits' findings and plans the recovery runbook.
CAPABILITIES = ("adoption", "audit", "explain", "recovery", "relocation", "remediation", "retention")
MAY_IMPORT = {"remediation": {"audit", "recovery"}}
BELOW = ("checkpoints", "storage", "runbooks", "control")


def _core_room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "stateops" and _layer(module) == "core" else None


def test_the_capabilities_stand_side_by_side_importing_each_other_only_as_listed():
    """A capability imports another only where MAY_IMPORT lists it (Spark's checkpoint facts live in
    stateops.checkpoints, below them all, not in the capability that first needed them); the rooms below import no
    capability."""
    graph = _modules()
    crossing = sorted(f"{module} imports {imported}" for module, imports in graph.items()
                      if _core_room(module) in CAPABILITIES for imported in imports
                      if _core_room(imported) in CAPABILITIES and _core_room(imported) != _core_room(module)
                      and _core_room(imported) not in MAY_IMPORT.get(_core_room(module), ()))
    assert crossing == []
    upwards = sorted(f"{module} imports {imported}" for module, imports in graph.items()
                     if _core_room(module) in BELOW for imported in imports if _core_room(imported) in CAPABILITIES)
    assert upwards == []


def test_sensors_never_import_the_dagster_code_which_composes_them():
    assert _importers(_modules(), SENSORS, (DAGSTER_CODE,)) == []


def test_no_package_cycle():
    graph = _modules()
    edges = defaultdict(set)
    for module, imports in graph.items():
        for imported in imports:
            if imported.split(".")[0] == "stateops" and _unit(imported) != _unit(module):
                edges[_unit(module)].add(_unit(imported))
    cycles = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if a < b and a in edges.get(b, ()))
    assert cycles == []
    # Longer loops too: a depth-first search finds any back edge.
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            assert state.get(nxt) != "open", f"package cycle: {' -> '.join(path + [node, nxt])}"
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [])


# A URL's scheme as code compares it: a branch on one of these outside stateops/storage is a backend the storage
# layer should hold (a lock, a record, a copy that works differently per storage).
_SCHEMES = {"s3", "s3a", "s3://", "s3a://", "gs", "gs://", "gcs", "gcs://", "abfs", "abfs://", "az", "az://",
            "hdfs", "hdfs://", "memory", "memory://"}


def _scheme_branches(path: str) -> list[str]:
    """Scheme names compared or matched in `path`'s code (==, in, startswith...): not in docstrings or messages."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "startswith", "endswith", "removeprefix"):
            parts = list(node.args)
        elif isinstance(node, (ast.Tuple, ast.Set, ast.List)):  # a set of schemes, as a constant
            parts = list(node.elts)
        else:
            continue
        found += [f"{os.path.relpath(path, ROOT)}:{c.lineno} {c.value!r}" for part in parts for c in ast.walk(part)
                  if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.lower() in _SCHEMES]
    return found


def test_no_scheme_branch_outside_the_storage_layer():
    """Locks, records and copies are written once per backend, in stateops/storage; the rest asks it
    (`kind`, `can_lock`, `one_store`) or just passes URLs to fsspec and delta-rs."""
    found = [hit for module, path in _project_files() if not module.startswith("stateops.storage")
             for hit in _scheme_branches(path)]
    assert found == []
    assert _scheme_branches(os.path.join(ROOT, "stateops", "storage", "paths.py")), "the check finds a branch"


# A checkpoint's folders and files as Spark names them, and the names of the runbook's archive of one: only
# stateops.checkpoints (and the storage layer below it) says them; everything else asks it.
CHECKPOINT_NAMES = {"offsets", "commits", "sources", "state", "_metadata", "_stateSchema", "plan.json",
                    "manifest.json", "report.json", "failed-attempt"}
JOINED_ONLY = {"metadata", "checkpoint"}  # words of every kind elsewhere: names only where joined into a path
_PATH_PARTS = ("offsets/", "commits/", "sources/", "state/", "_metadata/", "_stateSchema")
# Calls whose string arguments are not paths (dict keys, dataclass fields, CLI flags, SQL column names).
_NOT_PATHS = {"get", "pop", "setdefault", "field", "Field", "add_argument", "col", "getattr"}


def _checkpoint_names(path: str) -> list[str]:
    """Where `path` joins a checkpoint's folder or file name into a path (a call with it as an argument, a
    folder or file listed by it), or writes one into a path's text (`f"{cp}/offsets/{n}"`)."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _NOT_PATHS:
                continue
            names = CHECKPOINT_NAMES | (JOINED_ONLY if name in ("join", "_join") else set())
            found += [f"{os.path.relpath(path, ROOT)}:{node.lineno} {ast.unparse(node)[:80]}" for arg in node.args
                      if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.strip("/") in names]
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            found += [f"{os.path.relpath(path, ROOT)}:{node.lineno} {ast.unparse(node)[:80]}"
                      for part in _PATH_PARTS if f"/{part}" in text or text.startswith(part)]
    return found


def test_no_module_outside_the_checkpoints_room_names_a_checkpoints_folders_or_files():
    """Spark's checkpoint is read and written in stateops.checkpoints alone (its logs, operators, stores, schemas,
    the archive of one): a capability asks it (`source_dir(i)`, `state_dir(op, partition, store)`, ...) instead of
    joining `"offsets"` or `"state"` itself, so that each fact of those files lives in one place."""
    found = [hit for module, path in _project_files()
             if not module.startswith(("stateops.checkpoints", "stateops.storage"))
             for hit in _checkpoint_names(path)]
    assert found == []
    inside = [hit for module, path in _project_files() if module.startswith("stateops.checkpoints")
              for hit in _checkpoint_names(path)]
    assert inside, "the check finds the room's own names"


# Where the environment may be read (`X.from_env()`): the entry points (the CLI, the Dagster code location, its
# runs and sensor ticks) and the one module that builds what they hand down (stateops.jobs.definition.environment, beside the
# catalog): nothing in the core. Everything else takes its settings as parameters.
_READS_THE_ENVIRONMENT = (CLI, DAGSTER_CODE, SENSORS, "stateops.jobs.definition.environment")


def _from_env_calls(path: str) -> list[str]:
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    return [f"{os.path.relpath(path, ROOT)}:{node.lineno} {ast.unparse(node.func)}()" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_env"]


def test_no_from_env_below_the_entry_points():
    """An entry point reads the environment once (stateops.jobs.definition.environment.Environment) and passes it down: a call path
    that forgot to pass settings fails instead of reading the environment again on its own."""
    found = [hit for module, path in _project_files() if not module.startswith(_READS_THE_ENVIRONMENT)
             for hit in _from_env_calls(path)]
    assert found == []
    assert _from_env_calls(os.path.join(ROOT, "jobs", "definition", "environment.py")), "the check finds a call"


def _module_imports() -> dict[str, set[str]]:
    """Module -> the project's modules it imports: `from package import name` counts as an import of the
    submodule `package.name` when there is one, else of the package (its __init__)."""
    files = dict(_project_files())
    return {module: {imported for imported in _imports(path, files) if imported in files and imported != module}
            for module, path in files.items()}


def test_no_import_circle_between_modules():
    """No two modules import each other, directly or round a loop (a circle means one of them belongs below
    the other, or both share something that belongs below both)."""
    graph = _module_imports()
    state: dict[str, str] = {}
    circles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(path[path.index(nxt):] + [node, nxt]) if nxt in path else
                               f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, path + [node])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert circles == []


def _python_files(*folders: str):
    for top in folders:
        for folder, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    yield os.path.relpath(path, ROOT), _imports(path)


def _test_module(name: str) -> bool:
    """A test module (or a conftest): what pytest collects, never a library for other code."""
    last = name.split(".")[-1]
    return name.split(".")[0] == "tests" and (last.startswith("test_") or last == "conftest")


def test_no_module_imports_a_test_module_or_a_conftest():
    """Helpers and fixtures shared by tests live in tests/support (helpers) and conftest.py files (fixtures,
    found by pytest): a test module imported by another is a second copy of its module-scoped fixtures."""
    found = sorted(f"{path} imports {imported}" for path, imports in _python_files("tests", "bench", "scripts")
                   for imported in imports if _test_module(imported))
    assert found == []


def test_the_benchmarks_import_only_the_tests_support_package():
    found = sorted(f"{path} imports {imported}" for path, imports in _python_files("bench")
                   for imported in imports if imported.split(".")[0] == "tests"
                   and not imported.startswith("tests.support"))
    assert found == []


def _fixtures(path: str) -> list[str]:
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    return [node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
            and any("fixture" in ast.unparse(d) for d in node.decorator_list)]


def test_fixtures_live_only_in_conftest_files_one_meaning_per_name():
    """A fixture defined in a test module is private to it and invites an import from another; a name defined
    twice means two things depending on where a test sits."""
    defined: dict[str, list[str]] = defaultdict(list)
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "tests")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                for fixture in _fixtures(path):
                    defined[fixture].append(os.path.relpath(path, ROOT))
    outside = sorted(f"{p}: {f}" for f, paths in defined.items() for p in paths if not p.endswith("conftest.py"))
    assert outside == []
    assert {f: paths for f, paths in defined.items() if len(paths) > 1} == {}
