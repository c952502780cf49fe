"""Telemetry on this machine, which has no NVIDIA GPU: the no-NVML path, for real."""

from __future__ import annotations

import sys
import time
import types

import pytest

from agent.telemetry import GpuTelemetry, Sampler, cpu_facts
from orchestrator.api.schemas import GpuSampleIn


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


class FakeNvml(types.ModuleType):
    """The NVIDIA driver's library is outside this system (and this machine has no GPU): a
    stand-in with one RTX 4090 that supports neither ECC nor energy readings."""

    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 1, 0

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("pynvml")

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: return 1
    def nvmlDeviceGetHandleByIndex(self, index: int) -> str: return f"gpu{index}"
    def nvmlDeviceGetName(self, handle: str) -> str: return "NVIDIA GeForce RTX 4090"

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(used=8 << 30, free=16 << 30, total=24 << 30)

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int: return 0x20
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int: raise self.NVMLError()
    def nvmlDeviceGetTotalEccErrors(self, *args: object) -> int: raise self.NVMLError()
    def nvmlDeviceGetPcieReplayCounter(self, handle: str) -> int: return 3
    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int: return 71

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        return 2100 if clock == self.NVML_CLOCK_SM else 10501

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock: int) -> int: return 2520
    def nvmlDeviceGetPowerUsage(self, handle: str) -> int: return 330_000
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: str) -> int: return 450_000


def test_withNvml_readsEveryFieldAndLeavesUnsupportedOnesNone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    gpu = GpuTelemetry()

    [reading] = gpu.read()

    assert gpu.available and gpu.names == ["NVIDIA GeForce RTX 4090"]
    assert (reading.temperature_c, reading.sm_clock_mhz, reading.mem_clock_mhz) == (71, 2100,
                                                                                    10501)
    assert (reading.memory_used_mb, reading.memory_free_mb) == (8192, 16384)
    assert (reading.power_w, reading.power_limit_w, reading.clock_event_reasons) == (330, 450,
                                                                                     0x20)
    assert reading.energy_mj is None and reading.ecc_uncorrected is None  # not 0: unsupported
    assert reading.pcie_replays == 3
    sample = reading.api_sample()
    assert sample["throttle_reasons"] == 0x20 and sample["memory_total_mb"] == 24576
    GpuSampleIn.model_validate(sample)  # what /telemetry/gpu accepts
