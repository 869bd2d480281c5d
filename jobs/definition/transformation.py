"""A job's transformation: a callable named `module:function` that turns the job's input streams into its
stateful streaming DataFrame. Built-in and users' jobs alike; nothing here knows a job by name.

Its parameters are bound by name, so the signature says what it uses:

    def build(events): ...                   one parameter per input, named after it
    def build(orders, payments, spec): ...   `spec`: the JobSpec with the settings in force for this run
    def build(streams, spec): ...            `streams`: every input by name (a Mapping[str, DataFrame])

Each input stream holds the rows that parsed against the input's schema (dead letters are kept apart)
and already carries the job's watermark on the input's time column, with the watermark delay in force
(overrides included): the callable applies no watermark of its own. It returns a streaming DataFrame
with at least one stateful operator (checked when the run starts, before any query: stateops.jobs.runtime.plan).

The module must be importable where the driver runs (PYTHONPATH, sys.path or an installed package); Python
UDFs and stateful processors it defines are pickled by reference, so Spark's Python processes import it too.
`ship` puts the folder it was imported from on their PYTHONPATH (Spark's driver-side runner for
transformWithStateInPandas does not see the driver's sys.path, nor addPyFile); that is enough where the
folder is shared (local mode, a shared file system); otherwise install the package on the workers or ship
it with spark.submit.pyFiles.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Mapping

from stateops.errors import ConfigError

if TYPE_CHECKING:
    from stateops.jobs.definition.spec import JobSpec

STREAMS, SPEC = "streams", "spec"
_REFERENCE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_FIX_IMPORT = ("make it importable where StateOps runs: put its folder on PYTHONPATH or install its package "
               "(Spark's Python workers import it too)")


def _field(spec: "JobSpec") -> str:
    return f"jobs.{spec.name}.transformation"


@lru_cache(maxsize=None)
def _load(reference: str) -> Callable[..., Any]:
    module_name, _, attribute = reference.partition(":")
    module = importlib.import_module(module_name)
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


def load(spec: "JobSpec") -> Callable[..., Any]:
    """The callable `spec.transformation` names; ConfigError naming the field when it cannot be had."""
    reference = spec.transformation
    if not isinstance(reference, str) or not _REFERENCE.match(reference):
        raise ConfigError(_field(spec), f"{reference!r} is not a reference to a callable",
                          'write "module:function", e.g. "my_jobs.visits:build"')
    module_name = reference.partition(":")[0]
    try:
        target = _load(reference)
    except ModuleNotFoundError as err:
        missing = err.name or module_name
        raise ConfigError(_field(spec), f"cannot import {module_name!r} (no module named {missing!r})",
                          _FIX_IMPORT) from None
    except AttributeError:
        raise ConfigError(_field(spec), f"module {module_name!r} has no {reference.partition(':')[2]!r}",
                          "name a function defined in that module") from None
    except Exception as err:  # noqa: BLE001 - any error while importing user code is a configuration error
        raise ConfigError(_field(spec), f"importing {module_name!r} failed: {type(err).__name__}: {err}",
                          "fix the module so that it imports") from None
    if not callable(target):
        raise ConfigError(_field(spec), f"{reference!r} is {type(target).__name__}, not a function",
                          "name a function that returns the job's streaming DataFrame")
    return target


def parameters(spec: "JobSpec", target: Callable[..., Any]) -> tuple[str, ...]:
    """The names the callable takes, each an input, `streams` or `spec`; ConfigError otherwise."""
    inputs = [i.name for i in spec.inputs]
    fix = (f"name its parameters after the inputs ({', '.join(inputs)}), or take (streams, spec); "
           "see jobs/definition/transformation.py")
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        raise ConfigError(_field(spec), f"cannot read the parameters of {spec.transformation!r}", fix) from None
    if {STREAMS, SPEC} & set(inputs):
        raise ConfigError(f"jobs.{spec.name}.inputs", f"an input is named {STREAMS!r} or {SPEC!r}",
                          "rename it: those names are the transformation's other parameters")
    names = []
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise ConfigError(_field(spec), f"{spec.transformation!r} takes {parameter}, which cannot be bound "
                              "by name", fix)
        if parameter.name in (*inputs, STREAMS, SPEC):
            names.append(parameter.name)
        elif parameter.default is parameter.empty:
            raise ConfigError(_field(spec), f"{spec.transformation!r} takes {parameter.name!r}, which is neither "
                              f"an input of the job nor {STREAMS!r} or {SPEC!r}", fix)
    if not names:
        raise ConfigError(_field(spec), f"{spec.transformation!r} takes none of the job's inputs", fix)
    return tuple(names)


def check(spec: "JobSpec") -> None:
    """At load: the callable imports and its parameters can be bound (no Spark needed)."""
    parameters(spec, load(spec))


def _import_root(target: Callable[..., Any]) -> str | None:
    """The sys.path folder the callable's module was imported from (None for a module without a file)."""
    module = inspect.getmodule(target)
    path = getattr(module, "__file__", None)
    if module is None or not path:
        return None
    root = os.path.dirname(os.path.abspath(path))
    levels = module.__name__.count(".") + (os.path.basename(path) == "__init__.py")
    for _ in range(levels):
        root = os.path.dirname(root)
    return root


def ship(spec: "JobSpec", environment: dict[str, str]) -> None:
    """Add the transformation's import root to the PYTHONPATH of the Python processes Spark starts
    (SparkContext.environment, read when a Python function is wrapped)."""
    root = _import_root(load(spec))
    if root is None:
        return
    paths = [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths and root not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        environment["PYTHONPATH"] = os.pathsep.join([*paths, root])


def apply(spec: "JobSpec", streams: Mapping[str, Any]) -> Any:
    """Call the job's transformation with the streams (and spec) its parameters ask for."""
    target = load(spec)
    available = {**streams, STREAMS: streams, SPEC: spec}
    return target(**{name: available[name] for name in parameters(spec, target)})


def code_version(spec: "JobSpec") -> str:
    """A fingerprint of what the job's query computes: its transformation module's source and the spec's
    definition (inputs, join, output). It changes when either does (Dagster shows it per materialization)."""
    module = inspect.getmodule(load(spec))
    try:
        source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        source = ""
    definition = repr((spec.transformation, spec.inputs, spec.join, spec.output_mode, spec.merge_keys))
    return hashlib.sha256(f"{definition}\n{source}".encode()).hexdigest()[:16]
