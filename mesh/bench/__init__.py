"""Benchmarks behind `mesh bench ...`: each module exposes `run(...) -> dict` (JSON-ready)."""
