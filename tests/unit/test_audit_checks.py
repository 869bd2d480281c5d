"""The asset checks' verdict from recorded findings rows: severity mapping, metadata (no JVM, no runs)."""
import datetime as dt

import pytest
from dagster import AssetCheckSeverity

from stateops.dagster.audits.checks import check_result

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
AUDIT = {"audit_id": "a" * 32, "audited_at": NOW - dt.timedelta(minutes=7), "batch_id": 12}


def finding(code: str, severity: str) -> dict:
    return {"code": code, "severity": severity, "operator_id": 0, "store_name": "default",
            "message": f"{code} says {severity}", "recommendation": f"fix {code}"}


def test_error_and_warn_findings_fail_with_their_severity():
    result = check_result("state_skew", AUDIT, [finding("STATE_SKEW", "warn"), finding("STATE_SKEW", "error")], NOW)
    assert not result.passed and result.severity == AssetCheckSeverity.ERROR
    assert "STATE_SKEW says error" in result.description and "batch 12" in result.description
    assert result.metadata["audit_age_seconds"].value == 420.0
    messages = [m["message"] for m in result.metadata["messages"].value]
    assert messages == ["STATE_SKEW says warn", "STATE_SKEW says error"]
    assert "fix STATE_SKEW" in result.metadata["findings"].value

    result = check_result("state_eviction", AUDIT, [finding("UNBOUNDED_DEDUP", "warn")], NOW)
    assert not result.passed and result.severity == AssetCheckSeverity.WARN


def test_other_codes_and_info_pass():
    found = [finding("STATE_SKEW", "error"), finding("STATE_GROWTH", "info"), finding("WATERMARK_LAG", "warn")]
    result = check_result("state_growth", AUDIT, found, NOW)
    assert result.passed and result.metadata["messages"].value[0]["code"] == "STATE_GROWTH"


def test_no_audit_is_a_warning_not_a_pass():
    result = check_result("state_skew", None, [], NOW)
    assert not result.passed and result.severity == AssetCheckSeverity.WARN
    assert "no deep audit recorded" in result.description


def test_the_in_memory_stores_heap_fails_the_growth_check():
    result = check_result("state_growth", AUDIT, [finding("STATE_MEMORY", "error")], NOW)
    assert not result.passed and result.severity == AssetCheckSeverity.ERROR
    assert result.metadata["messages"].value[0]["code"] == "STATE_MEMORY"
