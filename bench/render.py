"""BENCHMARKS.md from the benchmarks' Reports: pure text, no Spark (unit-tested with fake Reports).

The template (bench/BENCHMARKS.template.md) holds the hand-written parts: the text before the first
`<!-- section: KEY -->` marker is the page's head, each marker's text explains that benchmark's method.
Everything measured comes from the Reports the benchmarks returned, stored per benchmark with the run that
printed them (bench/results/KEY.json), rendered in the registry's order.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

from bench.common import Report, Table
from bench.registry import Benchmark

MARKER = re.compile(r"^<!-- section: (\w+) -->\s*$", re.MULTILINE)


@dataclass(frozen=True)
class RunInfo:
    command: str
    started: str            # UTC
    finished: str
    machine: str            # cpu count, memory, Java, Python, pyspark
    load_before: str
    load_after: str


def split_template(text: str) -> tuple[str, dict[str, str]]:
    """(head, {section key: hand-written text})."""
    parts = MARKER.split(text)
    head, rest = parts[0], parts[1:]
    return head.strip(), {key: body.strip() for key, body in zip(rest[::2], rest[1::2])}


def cell(value: object) -> str:
    return "-" if value is None else str(value).replace("|", "\\|")


def table_markdown(table: Table) -> str:
    lines = [f"**{table.title}**", "", "| " + " | ".join(table.headers) + " |",
             "|" + "|".join("---" for _ in table.headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.rows]
    return "\n".join(lines)


def run_lines(run: RunInfo) -> str:
    return "\n".join([
        f"- command: `{run.command}`",
        f"- when: {run.started} - {run.finished} UTC",
        f"- machine: {run.machine}",
        f"- load average (1, 5, 15 min) before: {run.load_before}; after: {run.load_after}",
    ])


def section(benchmark: Benchmark, prose: str, result: "Result | None") -> str:
    parts = [f"## {benchmark.title}", f"`python -m {benchmark.module}`"]
    if prose:
        parts.append(prose)
    if result is None:
        parts.append("_Not measured yet: `python -m bench --only %s --write`._" % benchmark.key)
    else:
        report, run = result
        parts += ["### Measured", run_lines(run)]
        parts += [table_markdown(t) for t in report.tables]
        if report.notes:
            parts.append("\n".join(f"- {note}" for note in report.notes))
    return "\n\n".join(parts)


Result = tuple[Report, RunInfo]  # what one benchmark printed, and the run that printed it


def render(template: str, benchmarks: Sequence[Benchmark], results: Mapping[str, Result]) -> str:
    """The page: the template's head, then every registered benchmark's section with its latest stored
    result (each section names the run that measured it; ratios are side by side within that run)."""
    head, prose = split_template(template)
    unknown = sorted(set(prose) - {b.key for b in benchmarks})
    if unknown:
        raise ValueError(f"template sections {unknown} name no registered benchmark (bench/registry.py)")
    body = [section(b, prose.get(b.key, ""), results.get(b.key)) for b in benchmarks]
    return "\n\n".join([head, *body]) + "\n"


def dump_result(report: Report, run: RunInfo) -> dict:
    return {"run": asdict(run), "report": asdict(report)}


def load_result(data: dict) -> Result:
    report = data["report"]
    tables = [Table(t["title"], t["headers"], t["rows"]) for t in report["tables"]]
    return (Report(report["name"], report.get("description", ""), tables, list(report.get("notes", []))),
            RunInfo(**data["run"]))
