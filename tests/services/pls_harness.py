"""Helpers for the PLS service tests: a chain stand-in for tests that are not about the chain
(a fixed free-stake map), GPU samples as an agent reports them, the app's admin key."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.domain.chain_views import ProviderStake

ADMIN_KEY = "pls-admin-key"
ADMIN = {"x-admin-key": ADMIN_KEY}


class FixedStake:
    """Free stake per provider, as the chain would report it (tests not about the chain)."""

    def __init__(self, free: Mapping[str, int] | None = None) -> None:
        self.free: dict[str, int] = dict(free or {})
        self.reads = 0

    def provider_stake(self, provider: str) -> ProviderStake:
        self.reads += 1
        free = self.free.get(provider, 0)
        return ProviderStake(provider=provider, bonded=free, locked=0, unbonding=0, tier=1)


def gpu_sample(at: float, *, temperature_c: float = 60.0, throttle: int = 0,
               clock_mhz: float = 2500.0) -> dict[str, float | int]:
    return {"at": at, "temperature_c": temperature_c, "sm_clock_mhz": clock_mhz,
            "max_sm_clock_mhz": 2500.0, "throttle_reasons": throttle, "utilization_pct": 95.0,
            "memory_used_mb": 8000.0, "memory_total_mb": 24000.0, "power_w": 300.0,
            "power_limit_w": 450.0}
