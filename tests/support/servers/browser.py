"""The Dagster UI checked in a real browser: dagster-webserver on a StateOps instance, pages loaded by headless
Chromium (Debian package `chromium`; scripts/test installs it when missing), their rendered text read back.

    bash scripts/ui-check     (python -m tests.support.servers.browser: the demo's instance, every job)

`check_pages` asserts, for each job, that its asset page shows the Delta table's row count and columns, the
run's metadata and the latest check results, that its checks page shows every check with its result, and
that its deep audit's page shows the audit's metadata; the numbers come from the Dagster instance's API.
"""
from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Iterator

from dagster import AssetKey, DagsterInstance

from tests.support import ROOT
from tests.support.servers.ports import free_port

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
CHECKS = ("state_skew", "state_growth", "state_eviction", "state_readable", "state_compatible")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def webserver(stateops_home: str, dagster_home: str, timeout: float = 300) -> Iterator[str]:
    """dagster-webserver on workspace.yaml and the instance in `dagster_home`; yields its base URL."""
    port = free_port()
    env = {**os.environ, "STATEOPS_HOME": stateops_home, "DAGSTER_HOME": dagster_home,
           "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    log = tempfile.TemporaryFile()
    server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "dagster-webserver"), "-w",
                               os.path.join(ROOT, "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=5):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"dagster-webserver did not come up: {log.read()[-3000:].decode()}")
                time.sleep(1)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def _chromium(args: list[str], budget_ms: int) -> str:
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
                               *args], capture_output=True, text=True, timeout=budget_ms / 1000 + 600)
    return done.stdout


def page_text(url: str, budget_ms: int = 30000) -> str:
    """The page's visible text after its scripts ran (Chromium's --dump-dom, tags and scripts removed)."""
    dom = _chromium(["--dump-dom", url], budget_ms)
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)))


OBSERVATIONS = """query($key: AssetKeyInput!) { assetOrError(assetKey: $key) { ... on Asset {
  assetObservations(limit: 1) { metadataEntries { label __typename
    ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue } } } } } }"""


def observation_numbers(url: str, asset: str) -> dict[str, float]:
    """The numeric metadata of the asset's newest observation as the webserver's GraphQL serves it to the UI's
    plots (IntMetadataEntry, FloatMetadataEntry)."""
    body = json.dumps({"query": OBSERVATIONS, "variables": {"key": {"path": [asset]}}}).encode()
    request = urllib.request.Request(f"{url}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        data = json.load(answer)["data"]["assetOrError"]
    (latest,) = data["assetObservations"]
    return {e["label"]: e.get("intValue", e.get("floatValue")) for e in latest["metadataEntries"]
            if e["__typename"] in ("IntMetadataEntry", "FloatMetadataEntry")}


def _latest(instance: DagsterInstance, key: str) -> dict:
    event = instance.get_latest_materialization_event(AssetKey(key))
    assert event is not None, f"{key}: no materialization in the instance"
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def check_pages(url: str, instance: DagsterInstance, jobs: list[tuple[str, str]]) -> None:
    """jobs: (job name, its asset key). AssertionError naming the page and what it lacks."""
    for job, asset in jobs:
        meta = _latest(instance, asset)
        text = page_text(f"{url}/assets/{asset}")
        wanted = [f"Row count {meta['dagster/row_count']:,}", "Latest check results", "batches", "input_rows",
                  "watermark", *[column.name for column in meta["dagster/column_schema"].columns]]
        missing = [w for w in wanted if w not in text]
        assert not missing, f"asset page of {asset} lacks {missing}: {text[:1500]}"
        checks = page_text(f"{url}/assets/{asset}?view=checks")
        results = dict(re.findall(rf"\b({'|'.join(CHECKS)}) \1 (Succeeded|Failed|Warning)", checks))
        assert set(results) == set(CHECKS), f"checks page of {asset} shows {results}: {checks[:1500]}"
        audit = f"{job}_state_audit"
        audit_meta = _latest(instance, audit)
        text = page_text(f"{url}/assets/{audit}")
        wanted = ["audit_kind", "deep", "state_rows_total", f"{audit_meta['state_rows_total']}", "findings/error",
                  "operators", audit_meta["audit_id"]]
        missing = [w for w in wanted if w not in text]
        assert not missing, f"asset page of {audit} lacks {missing}: {text[:1500]}"


def main() -> int:
    from stateops.layout import Layout

    from tests.support.code_location import SPECS
    from stateops.dagster.instance import dagster_home

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if chromium() is None:
        print("chromium is not installed (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    layout = Layout.from_env()
    home = dagster_home(layout)
    jobs = [(spec.name, spec.sink_table) for spec in SPECS.values()]
    with DagsterInstance.from_config(home) as instance, webserver(layout.home, home) as url:
        check_pages(url, instance, jobs)
        print(f"UI checked in Chromium: {', '.join(job for job, _ in jobs)} (asset, checks and deep audit pages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
