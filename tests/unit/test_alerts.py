"""The alert webhook against real local HTTP servers (loopback): delivered with a Slack-compatible body,
retried with backoff on failures, given up after the retries, never blocking the caller."""
import threading

import pytest

from stateops.errors import ConfigError
from stateops.remediation.alerts import Alert, WebhookSender, WebhookSettings, sender_for


pytestmark = pytest.mark.unit

ALERT = Alert("user_activity: alert (skew.hot_key -> alert)", "key \"u0000\" holds 93% of partition 0: salt it",
              "warn", {"job": "user_activity", "audit": "a2", "rule": "skew.hot_key -> alert", "runbook": None})


def _sender(url: str, retries: int = 3) -> WebhookSender:
    return WebhookSender(WebhookSettings(url, retries=retries, backoff_seconds=0.01, timeout_seconds=10))


def test_delivers_a_slack_compatible_body(webhooks):
    server = webhooks([200])
    sender = _sender(server.url)
    assert sender.send(ALERT)
    assert sender.flush(30) and (sender.sent, sender.failed) == (1, 0)
    [(content_type, body)] = server.bodies
    assert content_type == "application/json"
    assert body["text"] == f"[WARN] {ALERT.title}: {ALERT.text}"
    header, section, context = body["blocks"]
    assert header == {"type": "header", "text": {"type": "plain_text", "text": ALERT.title}}
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn" and ALERT.text in section["text"]["text"]
    assert context["elements"][0]["text"] == "*job*: user_activity | *audit*: a2 | *rule*: skew.hot_key -> alert"


def test_retries_a_failing_server_then_delivers(webhooks):
    server = webhooks([500, 503, 429, 200])
    sender = _sender(server.url)
    sender.send(ALERT)
    assert sender.flush(30) and (sender.sent, sender.failed) == (1, 0)
    assert len(server.bodies) == 4 and all(b == server.bodies[0] for b in server.bodies)


def test_gives_up_after_the_retries_and_does_not_retry_a_client_error(webhooks):
    down = webhooks([500])
    sender = _sender(down.url, retries=2)
    sender.send(ALERT)
    assert sender.flush(30) and (sender.sent, sender.failed) == (0, 1)
    assert len(down.bodies) == 3  # the first attempt and two retries
    wrong = webhooks([404])
    sender = _sender(wrong.url, retries=2)
    sender.send(ALERT)
    assert sender.flush(30) and sender.failed == 1 and len(wrong.bodies) == 1


def test_no_server_at_all_fails_quietly(webhooks):
    server = webhooks([200])
    url = server.url
    server.close()  # nothing listens on that port any more: connection refused
    sender = _sender(url, retries=1)
    sender.send(ALERT)
    assert sender.flush(30) and (sender.sent, sender.failed) == (0, 1)


def test_send_returns_while_the_server_still_holds_the_request(webhooks):
    gate = threading.Event()
    server = webhooks([200], gate=gate)
    sender = _sender(server.url)
    assert sender.send(ALERT) and sender.send(ALERT)  # returned although no answer came yet
    assert not sender.flush(0.2) and sender.sent == 0
    gate.set()
    assert sender.flush(30) and sender.sent == 2


def test_settings_from_environment(monkeypatch):
    monkeypatch.delenv("STATEOPS_ALERT_WEBHOOK_URL", raising=False)
    assert sender_for(WebhookSettings.from_env()) is None
    monkeypatch.setenv("STATEOPS_ALERT_WEBHOOK_URL", "http://127.0.0.1:9/hook")
    monkeypatch.setenv("STATEOPS_ALERT_RETRIES", "5")
    assert WebhookSettings.from_env() == WebhookSettings("http://127.0.0.1:9/hook", retries=5)
    assert sender_for(WebhookSettings.from_env()) is sender_for(WebhookSettings.from_env())  # one thread per setting
    monkeypatch.setenv("STATEOPS_ALERT_RETRIES", "many")
    with pytest.raises(ConfigError, match="STATEOPS_ALERT_RETRIES: 'many' is not a whole number of 0 or more"):
        WebhookSettings.from_env()
    monkeypatch.setenv("STATEOPS_ALERT_WEBHOOK_URL", "hooks.example/x")
    with pytest.raises(ConfigError, match="STATEOPS_ALERT_WEBHOOK_URL: 'hooks.example/x' is not an http"):
        WebhookSettings.from_env()
