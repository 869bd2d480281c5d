"""An optional webhook for alerts, Slack-compatible, that never blocks a sensor tick.

Environment:
  STATEOPS_ALERT_WEBHOOK_URL       where to POST (unset: no webhook; Dagster's own UI still shows everything)
  STATEOPS_ALERT_RETRIES           3    attempts after the first, for network errors and 5xx/429 answers
  STATEOPS_ALERT_BACKOFF_SECONDS   1    wait before the first retry, doubled for each next one
  STATEOPS_ALERT_TIMEOUT_SECONDS   5    per attempt

`send` only queues the alert: one background thread per sender posts it (urllib), retrying with backoff,
and logs what it could not deliver. A full queue drops the new alert with a log line rather than wait.
The body is `{"text": ..., "blocks": [...]}`: Slack's incoming webhooks render the blocks, anything else
reads the text.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Mapping

from stateops.environment import numbers, text
from stateops.errors import ConfigError

log = logging.getLogger("stateops.alerts")
ENV_URL = "STATEOPS_ALERT_WEBHOOK_URL"
NUMBERS_ENV = {"retries": "STATEOPS_ALERT_RETRIES", "backoff_seconds": "STATEOPS_ALERT_BACKOFF_SECONDS",
               "timeout_seconds": "STATEOPS_ALERT_TIMEOUT_SECONDS"}
QUEUE_SIZE = 100


@dataclass(frozen=True)
class Alert:
    title: str  # e.g. "user_activity: STATE_SKEW (hot key)"
    text: str  # what was seen and what to do
    severity: str = "warn"  # info | warn | error
    fields: Mapping[str, Any] = field(default_factory=dict)  # job, audit id, rule, run key ...

    def body(self) -> dict[str, Any]:
        """Slack-compatible JSON: a plain `text` fallback plus blocks."""
        icon = {"error": ":red_circle:", "warn": ":warning:"}.get(self.severity, ":information_source:")
        context = " | ".join(f"*{k}*: {v}" for k, v in self.fields.items() if v is not None)
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": {"type": "plain_text", "text": self.title[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": f"{icon} {self.text}"[:3000]}},
        ]
        if context:
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context[:3000]}]})
        return {"text": f"[{self.severity.upper()}] {self.title}: {self.text}", "blocks": blocks}


@dataclass(frozen=True)
class WebhookSettings:
    url: str
    retries: int = 3
    backoff_seconds: float = 1.0
    timeout_seconds: float = 5.0

    @classmethod
    def from_env(cls) -> "WebhookSettings | None":
        url = text(ENV_URL) or ""
        if not url:
            return None
        if not url.startswith(("http://", "https://")):
            raise ConfigError(ENV_URL, f"{url!r} is not an http(s) URL", "set the webhook's full URL, or unset it")
        return cls(url, **numbers(NUMBERS_ENV, integers=("retries",), above=("timeout_seconds",)))


class WebhookSender:
    """Posts queued alerts from a background thread; `sent`/`failed` count the outcomes."""

    def __init__(self, settings: WebhookSettings):
        self.settings = settings
        self.sent = self.failed = self.dropped = 0
        self._queue: queue.Queue[Alert] = queue.Queue(QUEUE_SIZE)
        self._idle = threading.Condition()
        self._pending = 0
        self._thread = threading.Thread(target=self._work, name="stateops-alerts", daemon=True)
        self._thread.start()

    def send(self, alert: Alert) -> bool:
        """Queue `alert`; returns at once (False: the queue was full and the alert was dropped)."""
        with self._idle:
            try:
                self._queue.put_nowait(alert)
            except queue.Full:
                self.dropped += 1
                log.warning("alert dropped, %d alerts already queued: %s", QUEUE_SIZE, alert.title)
                return False
            self._pending += 1
        return True

    def flush(self, timeout: float) -> bool:
        """Wait until every queued alert was delivered or given up (for shutdown and tests)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def _work(self) -> None:
        while True:
            alert = self._queue.get()
            try:
                delivered = self._post(alert)
            except Exception:  # noqa: BLE001 - the sender thread must outlive any one alert
                log.exception("alert %r: unexpected error while sending", alert.title)
                delivered = False
            with self._idle:
                if delivered:
                    self.sent += 1
                else:
                    self.failed += 1
                self._pending -= 1
                self._idle.notify_all()

    def _post(self, alert: Alert) -> bool:
        data = json.dumps(alert.body()).encode()
        s = self.settings
        for attempt in range(s.retries + 1):
            request = urllib.request.Request(s.url, data=data, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=s.timeout_seconds) as response:
                    if 200 <= response.status < 300:
                        return True
                    problem = f"HTTP {response.status}"
            except urllib.error.HTTPError as err:
                problem = f"HTTP {err.code}"
                if err.code < 500 and err.code != 429:  # the request itself is wrong: retrying will not help
                    log.warning("alert %r not delivered to the webhook: %s (not retried)", alert.title, problem)
                    return False
            except (urllib.error.URLError, OSError) as err:
                problem = str(getattr(err, "reason", err))
            if attempt < s.retries:
                time.sleep(s.backoff_seconds * 2 ** attempt)
        log.warning("alert %r not delivered to the webhook after %d attempts: %s", alert.title, s.retries + 1, problem)
        return False


_SENDERS: dict[WebhookSettings, WebhookSender] = {}
_SENDERS_GUARD = threading.Lock()


def sender_for(settings: WebhookSettings | None) -> WebhookSender | None:
    """The process's sender for the webhook `settings` name (one thread per distinct setting, shared by every
    tick), or None when no webhook is configured."""
    if settings is None:
        return None
    with _SENDERS_GUARD:
        if settings not in _SENDERS:
            _SENDERS[settings] = WebhookSender(settings)
        return _SENDERS[settings]
