"""Run several `stateops` commands in one driver process, so they share one Spark application on the
cluster: one JVM and one set of executors instead of one per command (the cluster tests' time budget).

    python -m tests.support.cli_session '[["--home", "/h", "jobs", "run", "user_activity", "--json"], ...]'

Prints one JSON object: {"results": [{"args", "exit_code", "output"}, ...]}, each command's stdout as
`output`; stderr and Spark's console go where they would for the CLI.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys

import click

from stateops.cli.main import main


def run(args: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main.main(args, prog_name="stateops", standalone_mode=False) or 0
        except SystemExit as done:
            code = done.code or 0
        except click.ClickException as err:
            err.show()
            code = err.exit_code
    return {"args": args, "exit_code": code, "output": out.getvalue()}


if __name__ == "__main__":
    print(json.dumps({"results": [run(args) for args in json.loads(sys.argv[1])]}))
