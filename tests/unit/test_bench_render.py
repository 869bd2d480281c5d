"""BENCHMARKS.md rendering (bench/render.py) from fake Reports, and the committed file's sections against
the registry: pure logic, no JVM."""
from __future__ import annotations

import os

import pytest

from bench.common import Report, Table
from bench.registry import BENCHMARKS, Benchmark
from bench.render import RunInfo, render, split_template

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


def test_render_puts_run_facts_sections_in_registry_order_and_every_measured_cell():
    text = render(TEMPLATE, TWO, {"a": _report()}, RUN)
    assert text.startswith("# Benchmarks\n\nHead text.")
    assert "- command: `python -m bench --quick --write`" in text
    assert "2 CPUs (os.cpu_count), 23.5 GiB memory" in text
    assert "before: 4.00 3.00 2.00; after: 5.00 4.00 3.00" in text
    assert text.index("## Alpha vs baseline") < text.index("How alpha is measured.") < text.index("## Beta")
    assert "| size | side | median | ratio |" in text
    assert "| 1000 | alpha | 25 | 2.50x |" in text
    assert "| 5000 | a\\|b | - | 1.10x |" in text  # pipes escaped, missing values as '-'
    assert "- finished: load average 5.00 4.00 3.00" in text
    beta = text[text.index("## Beta"):]
    assert "_Not run in this run._" in beta and "|" not in beta


def test_a_template_section_without_a_registered_benchmark_is_refused():
    with pytest.raises(ValueError, match=r"\['zeta'\] name no registered benchmark"):
        render(TEMPLATE + "<!-- section: zeta -->\nOrphan.\n", TWO, {}, RUN)


def test_template_and_committed_benchmarks_md_have_every_registered_section():
    with open(os.path.join(ROOT, "bench", "BENCHMARKS.template.md")) as handle:
        _, prose = split_template(handle.read())
    assert set(prose) <= {b.key for b in BENCHMARKS}
    with open(os.path.join(ROOT, "BENCHMARKS.md")) as handle:
        committed = handle.read()
    assert "## This run" in committed and "- command: `python -m bench" in committed
    for benchmark in BENCHMARKS:
        assert f"## {benchmark.title}\n" in committed, benchmark.key
