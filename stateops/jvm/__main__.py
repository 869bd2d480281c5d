"""`python -m stateops.jvm fetch [--dest DIR]`: `stateops jars fetch` for an interpreter that has StateOps' source
but not yet its dependencies (bash scripts/setup fetches the jars while the virtual environment installs)."""
from __future__ import annotations

import argparse
import sys

from stateops.errors import StateOpsError
from stateops.jvm.jars import JarsFolder, fetch, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stateops.jvm")
    parser.add_argument("command", choices=["fetch"])
    parser.add_argument("--dest", default=None, help="folder (default: STATEOPS_JARS, else the per-user cache)")
    args = parser.parse_args(argv)
    try:
        done = fetch(args.dest or JarsFolder.of().path, echo=lambda line: print(f"stateops jars: {line}"))
    except StateOpsError as err:
        print(f"stateops jars: {err}", file=sys.stderr)
        return err.exit_code
    print(f"stateops jars: {summary(done)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
