"""The audit's texts name only commands that exist: every `stateops ...` mention (any case, so prose such as
"StateOps retention" counts) in the audit's messages, recommendations and docs is resolved against the real
click command tree, options included. No JVM: click and the modules' source only."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest

from stateops.cli.main import main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("stateops/audit/*.py"), ROOT / "stateops_cli" / "audit.py", ROOT / "jobs" / "definition" / "targets.py",
                  *ROOT.glob("orchestration/audits/*.py")])
MENTION = re.compile(r"\bstateops((?:[ \t]+[^\s|;,`]+)+)", re.IGNORECASE)
PLACEHOLDER = "X"


def texts(path: Path) -> list[str]:
    """Every string literal of a module (f-strings with each placeholder as X), docstrings included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr):
            found.append("".join(v.value if isinstance(v, ast.Constant) else PLACEHOLDER for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
    return found


def problem(mention: str) -> str | None:
    """Why `stateops <mention>` is not a real command line, or None."""
    words = [w.strip("()[]{}.:'\"") for w in mention.split()]
    command, path = main, []
    for word in words:
        if not isinstance(command, click.Group) or word not in command.commands:
            break
        command = command.commands[word]
        path.append(word)
    if not path:
        return f"{words[0]!r} is not a stateops command (commands: {sorted(main.commands)})"
    if isinstance(command, click.Group):
        return f"'stateops {' '.join(path)}' is a group: name one of {sorted(command.commands)}"
    options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    unknown = [w for w in words if w.startswith("-") and w.split("=")[0] not in options]
    return f"'stateops {' '.join(path)}' has no option {unknown}" if unknown else None


def mentions() -> list[tuple[str, str]]:
    return [(path.relative_to(ROOT).as_posix(), m.group(0)) for path in SOURCES for text in texts(path)
            for m in MENTION.finditer(text)]


def test_the_scan_sees_the_audit_texts():
    found = mentions()
    assert ("jobs/definition/targets.py", "stateops jobs run X)") in found  # an f-string in an error message
    assert any(where.startswith("orchestration/audits/") for where, _ in found)
    assert any(where.startswith("stateops/audit/") for where, _ in found)
    assert problem("retention") and problem("jobs") and problem("audit --fastest")
    assert problem("audit X --fast --json") is None and problem("jobs run X") is None


@pytest.mark.parametrize("where,mention", mentions())
def test_every_mentioned_command_exists(where, mention):
    assert problem(mention[len("stateops"):]) is None, f"{where}: {mention!r}"
