"""A built-in job's Delta table judged against the oracle (tests/support/oracle.py): the counts every
end-to-end and kill test asserts (duplicates, lost, invented rows; dead letters against malformed lines)."""
from __future__ import annotations

from stateops.delta import open_table
from stateops.layout import Layout
from tests.support import oracle
from tests.support.delta_rows import table_rows

COLUMNS = {"order_payments": ["order_id", "payment_id", "order_time", "payment_time"],
           "user_activity": ["window_start", "window_end", "user_id", "events", "value_sum"]}
# Every built-in job's table columns in the oracle's terms (COLUMNS: the jobs `outcome` judges, which tests iterate).
TABLE_COLUMNS = {**COLUMNS,
                 "user_sessions": ["session_start", "session_end", "user_id", "events", "first_event_time",
                                   "last_event_time"],
                 "user_actions": ["user_id", "action_count", "last_action", "first_event_time", "last_event_time"]}
KEYS = {"order_payments": ["order_id", "payment_id"], "user_activity": ["window_start", "user_id"]}


def expected_rows(local: Layout, spec) -> set[tuple]:
    """The oracle's rows for `spec` (any built-in job but user_engagement) over the landing files of `local`, batch by
    batch as the checkpoint's logs there say the run composed them."""
    delay = spec.watermark_seconds * 1000
    batches = {i.name: oracle.typed_batches(local.landing(i.name), i.name, local.checkpoint(spec.name))
               for i in spec.inputs}
    if spec.name == "order_payments":
        return oracle.order_payments(batches["orders"], batches["payments"], delay)
    if spec.name in ("user_sessions", "user_actions"):  # bounded runs: each ends with its no-data batch
        return getattr(oracle, spec.name)(batches["events"], delay)
    return oracle.user_activity(batches["events"], delay)


def outcome(layout: Layout, spec, local: Layout | None = None) -> dict:
    """Counts of the job's table (under `layout`, any storage) against the oracle over `local` (the same home, or
    a local mirror of its landing files and checkpoint): rows, expected_rows, duplicates, lost, invented,
    dead_letters, malformed_lines."""
    local = local or layout
    got = table_rows(layout.table(spec.name), TABLE_COLUMNS[spec.name])
    expected = expected_rows(local, spec)
    dead = table_rows(layout.deadletter_table(spec.name), ["raw"]) if open_table(layout.deadletter_table(spec.name)) else []
    return {"rows": len(got), "expected_rows": len(expected), "duplicates": len(got) - len(set(got)),
            "lost": len(expected - set(got)), "invented": len(set(got) - expected), "dead_letters": len(dead),
            "malformed_lines": sum(oracle.malformed_count(local.landing(i.name), i.name) for i in spec.inputs)}


def assert_equals_oracle(layout: Layout, spec, local: Layout | None = None) -> dict:
    """The table equals the oracle (no duplicate, nothing lost or invented) and every malformed line is a dead
    letter; returns the counts."""
    counts = outcome(layout, spec, local)
    assert counts["expected_rows"] > 0, counts
    assert counts["duplicates"] == 0 and counts["lost"] == 0 and counts["invented"] == 0, counts
    assert counts["dead_letters"] == counts["malformed_lines"], counts
    return counts


def local_mirror(layout: Layout, spec, dest: str) -> Layout:
    """A local copy of a job's landing files and checkpoint on object storage (the oracle reads local files);
    copying into an earlier mirror adds what is new."""
    from tests.support.servers.moto import mirror

    local = Layout(dest)
    for source in {i.name for i in spec.inputs}:
        mirror(layout.landing(source), local.landing(source))
    mirror(layout.checkpoint(spec.name), local.checkpoint(spec.name))
    return local
