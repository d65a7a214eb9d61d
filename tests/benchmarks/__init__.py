"""Benchmarks (pytest-benchmark; disabled by default, run with --benchmark-enable)."""
