"""Run every benchmark in one process (one Spark session): .venv/bin/python -m bench [--quick]"""
import sys

from jobs.session import get_session

from bench import bench_audit, bench_recovery, bench_sink, bench_state_store

spark = get_session()
bench_state_store.main(sys.argv[1:], spark=spark)
bench_sink.main(sys.argv[1:], spark=spark)
bench_audit.main(sys.argv[1:], spark=spark)
bench_recovery.main(sys.argv[1:], spark=spark)
