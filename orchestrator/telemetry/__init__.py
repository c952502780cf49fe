"""Heartbeat ingest and Prometheus metrics."""
