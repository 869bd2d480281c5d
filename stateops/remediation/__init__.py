"""Sensor-driven remediation, without Dagster: what a tick reads, what it decides, what holds it back.

    policy    Policy.from_config(config, job): per-job rules from [remediation] (validated at load)
    signals   the ops tables and file listings a tick reads (delta-rs, fsspec; OpsTableError when unreadable)
    skew, growth, health   pure decisions: finding -> remediate | restart | escalate | alert | skip
    guards    maintenance lock, already acted on, in flight, cooldown, daily budget; the sensor cursor
    tick      reading plus deciding for every watched job, one call per sensor
    alerts    the optional Slack-compatible webhook, sent from a background thread
    model     Decision and the `state_recovery` config a remediation launches

The sensors in `sensors/` are thin shells around this package.
"""
