"""Real servers on loopback for the tests and benchmarks, each in its own process (tests/support/__init__.py)."""
