"""BENCHMARKS.md rendering (bench/render.py) from fake Reports, stored results round-tripping, and the
committed file's sections against the registry and bench/results: pure logic, no JVM."""
from __future__ import annotations

import json
import os

import pytest

from bench.common import Report, Table
from bench.registry import BENCHMARKS, Benchmark
from bench.render import RunInfo, dump_result, load_result, render, split_template

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = RunInfo("python -m bench --quick --write", "2026-11-22 17:00", "2026-11-22 17:30",
              "2 CPUs (os.cpu_count), 23.5 GiB memory (/proc/meminfo)", "4.00 3.00 2.00", "5.00 4.00 3.00")
TWO = (Benchmark("a", "Alpha vs baseline", "bench.bench_a"), Benchmark("b", "Beta", "bench.bench_b"))
TEMPLATE = "# Benchmarks\n\nHead text.\n\n<!-- section: a -->\nHow alpha is measured.\n"


def _report() -> Report:
    report = Report("a")
    report.tables.append(Table("median ms; ratio = alpha / baseline", ["size", "side", "median", "ratio"],
                               [[1000, "baseline", "10", ""], [1000, "alpha", "25", "2.50x"],
                                [5000, "a|b", None, "1.10x"]]))
    report.notes.append("finished: load average 5.00 4.00 3.00")
    return report


def test_render_puts_each_sections_run_facts_in_registry_order_and_every_measured_cell():
    text = render(TEMPLATE, TWO, {"a": (_report(), RUN)})
    assert text.startswith("# Benchmarks\n\nHead text.")
    alpha = text[text.index("## Alpha vs baseline"):text.index("## Beta")]
    assert "- command: `python -m bench --quick --write`" in alpha
    assert "2 CPUs (os.cpu_count), 23.5 GiB memory" in alpha
    assert "before: 4.00 3.00 2.00; after: 5.00 4.00 3.00" in alpha
    assert alpha.index("How alpha is measured.") < alpha.index("### Measured") < alpha.index("- command:")
    assert "| size | side | median | ratio |" in alpha
    assert "| 1000 | alpha | 25 | 2.50x |" in alpha
    assert "| 5000 | a\\|b | - | 1.10x |" in alpha  # pipes escaped, missing values as '-'
    assert "- finished: load average 5.00 4.00 3.00" in alpha
    beta = text[text.index("## Beta"):]
    assert "_Not measured yet: `python -m bench --only b --write`._" in beta and "|" not in beta


def test_a_stored_result_renders_as_the_report_did():
    stored = json.loads(json.dumps(dump_result(_report(), RUN)))
    assert render(TEMPLATE, TWO, {"a": load_result(stored)}) == render(TEMPLATE, TWO, {"a": (_report(), RUN)})


def test_a_template_section_without_a_registered_benchmark_is_refused():
    with pytest.raises(ValueError, match=r"\['zeta'\] name no registered benchmark"):
        render(TEMPLATE + "<!-- section: zeta -->\nOrphan.\n", TWO, {})


def test_committed_benchmarks_md_is_the_rendering_of_the_stored_results():
    """Every registered benchmark has a stored result and BENCHMARKS.md is exactly what they render to."""
    with open(os.path.join(ROOT, "bench", "BENCHMARKS.template.md")) as handle:
        template = handle.read()
    _, prose = split_template(template)
    assert set(prose) <= {b.key for b in BENCHMARKS}
    results = {}
    for benchmark in BENCHMARKS:
        with open(os.path.join(ROOT, "bench", "results", f"{benchmark.key}.json")) as handle:
            results[benchmark.key] = load_result(json.load(handle))
        assert results[benchmark.key][0].name == benchmark.key
    with open(os.path.join(ROOT, "BENCHMARKS.md")) as handle:
        assert handle.read() == render(template, BENCHMARKS, results)


@pytest.mark.parametrize("benchmark", BENCHMARKS, ids=lambda b: b.key)
def test_every_registered_benchmark_imports_and_has_its_main(benchmark):
    """`python -m bench` imports every registered module before it runs one: one broken import (a name moved from
    stateops.jobs.runtime.session) stopped every benchmark."""
    import importlib

    assert callable(importlib.import_module(benchmark.module).main)
