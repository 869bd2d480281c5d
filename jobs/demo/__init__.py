"""The demo's input: deterministic event files, and producing them to Kafka topics."""
