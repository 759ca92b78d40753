"""Tally's benchmark suite: `python -m benchmarks [--quick]`. See benchmarks/README.md."""
