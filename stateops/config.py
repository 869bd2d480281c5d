"""The configuration file (STATEOPS_CONFIG), read and validated once per entry point and passed down.

    [catalog]                                   builtin_jobs (stateops.jobs.definition.catalog)
    [jobs.NAME]                                 a job's definition or its overrides (stateops.jobs.definition.spec)
    [audit], [audit.jobs.NAME]                  finding thresholds (stateops.audit.thresholds)
    [remediation], [remediation.jobs.NAME]      what the sensors do (stateops.remediation.policy)
    [retention], [retention.jobs.NAME], [retention.ops_tables]   (stateops.retention.policy)

Every table is a pydantic model with unknown keys refused and strict types (TOML `true` is no count, "5" no
number), so a typo never falls back to a default in silence: an unknown table, an unknown key or a per-job
table naming no job is one ConfigError naming the field and the fix. The core validates the sections it owns;
the job tables are checked against the job model by stateops.jobs.definition.spec, which also knows the job names.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from stateops.errors import ConfigError

S = TypeVar("S", bound="Section")
TABLES = ("catalog", "jobs", "audit", "remediation", "retention")


def refuse(problem: str, fix: str) -> PydanticCustomError:
    """A value rule's own words, for a field validator to raise: Section.parse turns it into a ConfigError."""
    return PydanticCustomError("stateops", "{problem}", {"problem": problem, "fix": fix})


class Section(BaseModel):
    """One table of the config file. Subclasses declare fields with their defaults and constraints; a field's
    `json_schema_extra={"fix": ...}` words the fix for a value outside its bounds."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    what: ClassVar[str] = "a setting"        # "<field>: is not {what}"

    @classmethod
    def parse(cls: type[S], values: Any, where: str, base: S | None = None) -> S:
        """`values` (a TOML table) over `base` (default: the defaults), validated; ConfigError naming
        `where.key` otherwise."""
        if not isinstance(values, Mapping):
            raise ConfigError(where, f"{values!r} is not a table", f"write it as [{where}] with name = value lines")
        try:
            return cls.model_validate({**(base.model_dump() if base is not None else {}), **values})
        except ValidationError as err:
            raise cls._config_error(err, where, values) from None

    def updated(self: S, values: Mapping[str, Any], where: str) -> S:
        """This section with `values` on top, validated like the file's."""
        return type(self).parse(values, where, base=self)

    @classmethod
    def _config_error(cls, err: ValidationError, where: str, values: Mapping[str, Any]) -> ConfigError:
        first = err.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else ""
        name, value = f"{where}.{key}" if key else where, first.get("input")
        spec = cls.model_fields.get(key)
        default = spec.default if spec is not None else None
        extra = (spec.json_schema_extra or {}) if spec is not None else {}
        kind, ctx = first["type"], first.get("ctx") or {}
        if kind == "extra_forbidden":
            return ConfigError(name, f"is not {cls.what}{cls._misplaced(key)}", f"use one of {sorted(cls.model_fields)}")
        if kind == "stateops":
            return ConfigError(name, ctx["problem"], ctx["fix"])
        if kind == "bool_type":
            return ConfigError(name, f"{value!r} is not true or false", f"write {key} = true or false")
        if kind == "literal_error":
            return ConfigError(name, f"{value!r} is not one of {ctx['expected'].replace(' or ', ', ')}",
                               f"write one of {ctx['expected'].replace(' or ', ', ')}")
        if kind in ("int_type", "float_type") and isinstance(value, float) and not isinstance(value, bool):
            return ConfigError(name, f"{value} is not a whole number", f"write an integer, e.g. {key} = {default}")
        if kind in ("int_type", "float_type"):
            return ConfigError(name, f"{value!r} is not a number",
                               f"write a plain number without quotes, e.g. {key} = {default}")
        if kind == "string_type":
            return ConfigError(name, f"{value!r} is not text", f'write it in quotes, e.g. {key} = "{default}"')
        bounds = {"greater_than_equal": ("is below", "ge", "or more"), "less_than_equal": ("is above", "le", "or less"),
                  "greater_than": ("is not above", "gt", None), "less_than": ("is not below", "lt", None)}
        if kind in bounds:
            words, bound, tail = bounds[kind]
            fix = extra.get("fix") or (f"use {ctx[bound]} {tail}" if tail else f"use a value {words[7:]} {ctx[bound]}")
            return ConfigError(name, f"{value} {words} {ctx[bound]}", fix)
        return ConfigError(name, f"{value!r}: {first['msg']}", f"write a value like the default, {key} = {default!r}")

    @classmethod
    def _misplaced(cls, key: str) -> str:
        """A hint when `key` belongs to another level of the same section (subclasses say where)."""
        return ""


def layered(section: type[S], table: Any, where: str) -> tuple[S, dict[str, S]]:
    """`[where]` over the defaults, and each `[where.jobs.NAME]` over that: (for every job, {name: for one})."""
    table = {} if table is None else table
    if not isinstance(table, Mapping):
        raise ConfigError(where, f"{table!r} is not a table", f"write it as [{where}] with name = value lines")
    base = section.parse({k: v for k, v in table.items() if k != "jobs"}, where)
    per_job = table.get("jobs", {})
    if not isinstance(per_job, Mapping):
        raise ConfigError(f"{where}.jobs", f"{per_job!r} is not a table", f"write per-job values as [{where}.jobs.NAME]")
    return base, {name: section.parse(values, f"{where}.jobs.{name}", base) for name, values in per_job.items()}


@dataclass(frozen=True)
class ConfigFile:
    """The parsed file: its path (None: no file) and its tables, each already checked for unknown keys.
    `per_job_sections` lists the `[<section>.jobs.NAME]` names, checked against the catalog's jobs by
    `check_job_names` once the catalog is loaded."""

    path: str | None = None
    tables: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | None) -> "ConfigFile":
        if not path:
            return cls()
        try:
            with open(path, "rb") as handle:
                tables = tomllib.load(handle)
        except FileNotFoundError:
            raise ConfigError("STATEOPS_CONFIG", f"file {path!r} does not exist",
                              "point it to a TOML file, or unset it to use the built-in jobs") from None
        except tomllib.TOMLDecodeError as err:
            raise ConfigError("STATEOPS_CONFIG", f"{path!r} is not valid TOML ({err})",
                              "fix the syntax; see docs/configuration.md") from None
        return cls.of(tables, path)

    @classmethod
    def of(cls, tables: Mapping[str, Any], path: str | None = None) -> "ConfigFile":
        """A file's tables, refused when one is not a table StateOps reads."""
        for name, value in tables.items():
            if name not in TABLES:
                raise ConfigError(name, "is not a table StateOps reads",
                                  f"use one of {list(TABLES)} (a job's settings go under [jobs.NAME])")
            if not isinstance(value, Mapping):
                raise ConfigError(name, f"{value!r} is not a table", f"write it as [{name}] with name = value lines")
        return cls(path, tables)

    def table(self, name: str) -> Mapping[str, Any]:
        return self.tables.get(name, {})

    def check_job_names(self, jobs: Any) -> None:
        """Every `[<section>.jobs.NAME]` names a configured job (a typo would otherwise apply to nothing)."""
        known = sorted(jobs)
        for section in ("audit", "remediation", "retention"):
            per_job = self.table(section).get("jobs", {})
            for name in per_job if isinstance(per_job, Mapping) else ():
                if name not in known:
                    raise ConfigError(f"{section}.jobs.{name}", "is not a known job", f"use one of {known}")
