"""Deterministic churn simulator: replays node availability through the real domain code
(matching, failure detector, lifecycle, Predictive Latency Staking) under several policies."""
