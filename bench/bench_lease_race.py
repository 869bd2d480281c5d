"""Lease race: how long two processes racing for one job's lease take per round, with the control plane on local
disk and on an S3 API (moto's server on loopback), side by side in one run.

Each round both racers try to take the lease at the same instant (tests/support/lease_race.py: a start time a few
milliseconds ahead), exactly one wins (the control plane's test asserts that), then the winner releases: a round is
two critical sections that read the maintenance lock and the lease and one writes it, plus the release. Per backend:
the median and slowest round and the median spread of the two tries' starts (how simultaneous they were); ratio =
S3 / local disk. The figure the S3 control plane's test used to assert (a median round under 0.5 s, which failed
under load) is this benchmark's.

  .venv/bin/python -m bench.bench_lease_race [--quick] [--rounds 50]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Sequence

from bench.common import Report, fmt_ratio, machine

JOB = "user_activity"
BUCKET = "lease-race"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 rounds per backend")
    parser.add_argument("--rounds", type=int, default=50, help="rounds per backend (default 50)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = 10
    return args


def _race(home: str, rounds: int, logs: Path, env: dict[str, str]) -> list:
    from tests.support.lease_race import racers

    with racers(JOB, logs, {**os.environ, **env, "STATEOPS_HOME": home}) as racing:
        for number in range(rounds):
            done = racing.race(number)
            if sorted(done.outcomes) != ["refused", "won"]:
                raise RuntimeError(f"{home}: round {number} ended {done.outcomes}: not exactly one winner")
    return racing.rounds


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    import boto3

    from tests.support.servers.moto import moto_s3

    args = parse_args(argv)
    report = Report("lease_race", f"two processes racing for one job's lease, {args.rounds} rounds per backend; "
                                  f"{machine()}")
    measured = {}
    with moto_s3() as env, tempfile.TemporaryDirectory(prefix="stateops-lease-race-") as root:
        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"],
                     aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=BUCKET)
        for backend, home in (("local disk", os.path.join(root, "home")), ("S3 API", f"s3://{BUCKET}/home")):
            logs = Path(root, backend.replace(" ", "-"))
            logs.mkdir()
            measured[backend] = _race(home, args.rounds, logs, env)
            print(f"  {backend}: median round {statistics.median(r.seconds for r in measured[backend]):.3f} s",
                  flush=True)
    rows = []
    for backend, rounds in measured.items():
        seconds = [r.seconds for r in rounds]
        rows.append([backend, f"{statistics.median(seconds) * 1000:.0f} ms", f"{max(seconds) * 1000:.0f} ms",
                     f"{statistics.median(r.spread_seconds for r in rounds) * 1000:.2f} ms"])
    local, s3 = (statistics.median(r.seconds for r in measured[b]) for b in ("local disk", "S3 API"))
    report.table(f"A round: both try, one wins, it releases ({args.rounds} rounds; ratio S3 / local disk "
                 f"{fmt_ratio(s3 / local)})", ["control plane on", "median round", "slowest round",
                                               "start spread (median)"], rows)
    return report


if __name__ == "__main__":
    main()
