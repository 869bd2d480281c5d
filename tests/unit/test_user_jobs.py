"""Users' own jobs at load (no JVM): `[jobs.<name>]` tables with `transformation = "module:function"`, the
`stateops.jobs` entry point group, and the refusals that name the field and the fix. The user modules are
written into a temporary folder on sys.path, outside the package."""
import importlib.metadata
import os
import textwrap

import pytest

from stateops.jobs.definition import catalog, transformation
from stateops.jobs.definition.environment import load_jobs
from stateops.jobs.definition.spec import InputSpec, JobSpec
from stateops.errors import ConfigError
from stateops.layout import Layout

pytestmark = pytest.mark.unit

JOB = """
[catalog]
builtin_jobs = false

[jobs.visits]
transformation = "{reference}"
output_mode = "append"
watermark_delay = "10 minutes"
watermark_min = "1 minute"
watermark_max = "1 hour"
owners = ["team:web"]
tags = {{ domain = "web" }}
{extra}
[[jobs.visits.inputs]]
name = "clicks"
schema = "click_id STRING, page STRING, click_time TIMESTAMP"
time_column = "click_time"
"""
MODULE = """
def visits(clicks):
    return clicks.groupBy("page").count()

def by_name(streams, spec):
    return streams["clicks"]

def wrong(pages):
    return pages

def star(*streams):
    return streams[0]

def nothing():
    return None

def broken(clicks):
    return clicks

NOT_CALLABLE = 3
"""


def _user_code(tmp_path, importable):
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / "my_visits.py").write_text(MODULE)
    (folder / "my_broken.py").write_text("import no_such_dependency\n")
    (folder / "my_raises.py").write_text("raise RuntimeError('bad module')\n")
    importable(folder)
    return folder


def _load(tmp_path, reference: str, extra: str = "") -> dict[str, JobSpec]:
    config = tmp_path / "stateops.toml"
    config.write_text(textwrap.dedent(JOB.format(reference=reference, extra=extra)))
    return load_jobs(str(config), Layout(str(tmp_path / "home")))


def test_a_config_table_defines_a_job_from_a_user_module(tmp_path, importable):
    _user_code(tmp_path, importable)
    jobs = _load(tmp_path, "my_visits:visits", 'merge_keys = ["page"]\nshuffle_partitions = 3\n')
    assert set(jobs) == {"visits"}  # builtin_jobs = false leaves the examples out
    spec = jobs["visits"]
    assert (spec.transformation, spec.sink_table, spec.output_mode) == ("my_visits:visits", "visits", "append")
    assert spec.inputs == (InputSpec("clicks", "click_id STRING, page STRING, click_time TIMESTAMP", "click_time"),)
    assert (spec.owners, spec.tags, spec.shuffle_partitions, spec.merge_keys) == (
        ("team:web",), {"domain": "web"}, 3, ("page",))
    assert _load(tmp_path, "my_visits:by_name")["visits"].transformation == "my_visits:by_name"


@pytest.mark.parametrize("reference,words", [
    ("my_visits.visits", "not a reference to a callable"),
    ("no_such_module:visits", "cannot import 'no_such_module' (no module named 'no_such_module')"),
    ("my_broken:f", "cannot import 'my_broken' (no module named 'no_such_dependency')"),
    ("my_raises:f", "importing 'my_raises' failed: RuntimeError: bad module"),
    ("my_visits:absent", "module 'my_visits' has no 'absent'"),
    ("my_visits:NOT_CALLABLE", "is int, not a function"),
    ("my_visits:wrong", "takes 'pages', which is neither an input of the job nor 'streams' or 'spec'"),
    ("my_visits:star", "cannot be bound by name"),
    ("my_visits:nothing", "takes none of the job's inputs"),
])
def test_a_transformation_that_cannot_be_used_is_refused_at_load(tmp_path, reference, words, importable):
    _user_code(tmp_path, importable)
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, reference)
    assert err.value.field == "jobs.visits.transformation"
    assert words in str(err.value) and "Fix:" in str(err.value), str(err.value)


@pytest.mark.parametrize("extra,field,words", [
    ('colour = "red"\n', "jobs.visits.colour", "is not a job setting"),
    ("shuffle_partitions = 0\n", "jobs.visits.shuffle_partitions", "not a positive integer"),
    ("join = { left = \"clicks\", right = \"views\", upper = \"1 minute\" }\n", "jobs.visits.join.right",
     "is not an input of the job"),
])
def test_bad_user_job_settings_name_the_field(tmp_path, extra, field, words, importable):
    _user_code(tmp_path, importable)
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, "my_visits:visits", extra)
    assert err.value.field == field and words in str(err.value), str(err.value)


def test_a_table_missing_a_defining_setting_says_which(tmp_path, importable):
    _user_code(tmp_path, importable)
    config = tmp_path / "stateops.toml"
    config.write_text('[jobs.visits]\ntransformation = "my_visits:visits"\noutput_mode = "append"\n')
    with pytest.raises(ConfigError) as err:
        load_jobs(str(config), Layout(str(tmp_path / "home")))
    assert err.value.field == "jobs.visits.inputs" and "is required to define a job" in str(err.value)


class _Point:
    """An installed package's entry point, as importlib.metadata hands it out."""

    def __init__(self, name, value, loaded):
        self.name, self.value, self._loaded = name, value, loaded

    def load(self):
        if isinstance(self._loaded, Exception):
            raise self._loaded
        return self._loaded


def test_entry_point_jobs_load_next_to_the_examples_and_bad_ones_are_named(tmp_path, monkeypatch, importable):
    _user_code(tmp_path, importable)
    spec = JobSpec(name="visits", inputs=(InputSpec("clicks", "click_id STRING, click_time TIMESTAMP",
                                                    "click_time"),),
                   transformation="my_visits:visits", output_mode="append", sink_table="visits",
                   watermark_delay="10 minutes", watermark_min="1 minute", watermark_max="1 hour")
    points = []
    monkeypatch.setattr(catalog, "entry_points",
                        lambda group: points if group == catalog.ENTRY_POINT_GROUP else importlib.metadata.EntryPoints())
    points[:] = [_Point("web", "my_visits:JOBS", [spec])]
    jobs = load_jobs("", Layout(str(tmp_path / "home")))
    assert set(jobs) == {"user_activity", "user_sessions", "order_payments", "user_actions", "visits"}

    points[:] = [_Point("web", "my_visits:JOBS", "visits")]
    with pytest.raises(ConfigError, match="is str, not a JobSpec or a list of JobSpecs"):
        load_jobs("", Layout(str(tmp_path / "home")))
    points[:] = [_Point("web", "my_gone:JOBS", ModuleNotFoundError("No module named 'my_gone'"))]
    with pytest.raises(ConfigError, match="cannot be loaded: ModuleNotFoundError") as err:
        load_jobs("", Layout(str(tmp_path / "home")))
    assert err.value.field == "entry point web = 'my_gone:JOBS' (stateops.jobs)"
    points[:] = [_Point("web", "my_visits:JOBS", [spec]), _Point("web2", "my_visits:JOBS", spec)]
    with pytest.raises(ConfigError, match="is defined twice"):
        load_jobs("", Layout(str(tmp_path / "home")))


def test_the_transformation_folder_is_shipped_to_sparks_python_processes(tmp_path, monkeypatch, importable):
    """Spark's driver-side runner for transformWithStateInPandas imports the module in a new process that
    sees PYTHONPATH only, not this process's sys.path: the folder it was imported from goes there, once."""
    user_code = _user_code(tmp_path, importable)
    package = user_code / "acme" / "streams"
    package.mkdir(parents=True)
    (user_code / "acme" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("def build(clicks):\n    return clicks\n")
    (user_code / "ship_top.py").write_text("def build(clicks):\n    return clicks\n")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    spec = _load(tmp_path, "ship_top:build", 'merge_keys = ["page"]\n')["visits"]
    environment = {"PYTHONPATH": "/already"}
    transformation.ship(spec, environment)
    transformation.ship(spec, environment)
    assert environment["PYTHONPATH"].split(os.pathsep) == ["/already", str(user_code)]
    nested = _load(tmp_path, "acme.streams:build", 'merge_keys = ["page"]\n')["visits"]
    environment = {}
    transformation.ship(nested, environment)
    assert environment == {"PYTHONPATH": str(user_code)}  # the root above the package, not the package
    monkeypatch.setenv("PYTHONPATH", str(user_code))
    environment = {}
    transformation.ship(nested, environment)
    assert environment == {}  # already where Spark's processes look
