"""What the fault suite counted (trials, duplicates, lost rows, archives), printed in pytest's terminal
summary by tests/conftest.py so that every run shows it, passing or not."""
from __future__ import annotations

RESULTS: list[tuple[str, dict]] = []


def record(scenario: str, counts: dict) -> None:
    RESULTS.append((scenario, dict(counts)))


def lines() -> list[str]:
    return [f"{scenario}: " + ", ".join(f"{k}={v}" for k, v in counts.items()) for scenario, counts in RESULTS]
