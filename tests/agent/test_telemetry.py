"""Telemetry on this machine, which has no NVIDIA GPU: the no-NVML path, for real."""

from __future__ import annotations

import time

import pytest

from agent.telemetry import GpuTelemetry, Sampler, cpu_facts


@pytest.fixture
def gpu() -> GpuTelemetry:
    telemetry = GpuTelemetry()
    if telemetry.available:
        pytest.skip("this machine has an NVIDIA GPU; the no-GPU path is not reachable")
    return telemetry


def test_withoutNvml_saysWhyAndReportsNoGpuNumbers(gpu: GpuTelemetry) -> None:
    assert gpu.unavailable and "no NVIDIA GPU telemetry" in gpu.unavailable
    assert gpu.read() == [] and gpu.names == []

    sampler = Sampler(gpu, period_s=0.05)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    summary = sampler.summary()

    assert sampler.drain() == []
    assert "gpu" not in summary and summary["gpu_unavailable"] == gpu.unavailable
    assert summary["cpu"]["cpu_count"] >= 1


def test_cpuFacts_areTheHostsOwn() -> None:
    facts = cpu_facts()
    assert facts["cpu_model"] and facts["memory_total_mb"] > 0
