"""Benchmarks: pytest-benchmark micro benchmarks and the `kraftlog bench` report."""
