"""DePIN Mesh orchestrator: scheduling, telemetry, Predictive Latency Staking, settlement."""
