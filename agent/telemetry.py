"""GPU telemetry through pynvml at about 1 Hz, summarised for heartbeats; CPU facts always.

Without NVML (library missing, driver not loaded, no permission, no device) `GpuTelemetry`
says why once, in `unavailable`, and yields no GPU readings at all: no GPU number is ever
made up. The fields follow dcgm-exporter's default list where NVML offers them; a field the
device does not support (ECC on consumer cards, energy on old ones) is None, not 0.
"""

from __future__ import annotations

import contextlib
import os
import platform
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

MAX_KEPT = 120  # one batch of /telemetry/gpu at most


@dataclass(frozen=True, slots=True)
class GpuReading:
    at: float
    index: int
    name: str
    temperature_c: float
    sm_clock_mhz: float
    max_sm_clock_mhz: float
    mem_clock_mhz: float | None
    utilization_pct: float
    memory_used_mb: float
    memory_free_mb: float
    memory_total_mb: float
    power_w: float
    power_limit_w: float
    energy_mj: float | None  # total since the driver loaded (millijoules)
    clock_event_reasons: int  # nvmlDeviceGetCurrentClocksEventReasons bitmask
    ecc_uncorrected: int | None
    xid_last: int | None  # not readable without an event set; None unless supported
    pcie_replays: int | None

    def api_sample(self) -> dict[str, float | int]:
        """The fields `POST /v1/nodes/{id}/telemetry/gpu` takes (`GpuSampleIn`); the optional
        NVML facts only where the device reported them."""
        sample: dict[str, float | int] = {
            "at": self.at, "temperature_c": self.temperature_c,
            "sm_clock_mhz": self.sm_clock_mhz, "max_sm_clock_mhz": self.max_sm_clock_mhz,
            "throttle_reasons": self.clock_event_reasons,
            "utilization_pct": self.utilization_pct, "memory_used_mb": self.memory_used_mb,
            "memory_total_mb": self.memory_total_mb, "power_w": self.power_w,
            "power_limit_w": self.power_limit_w, "memory_free_mb": self.memory_free_mb}
        for name in ("mem_clock_mhz", "energy_mj", "ecc_uncorrected", "xid_last",
                     "pcie_replays"):
            value = getattr(self, name)
            if value is not None:
                sample[name] = value
        return sample


def cpu_facts() -> dict[str, Any]:
    """What the host is, whatever its GPU: model, cores, load, memory."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo", encoding="utf-8"):  # noqa: SIM115
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    meminfo: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo", encoding="utf-8"):  # noqa: SIM115
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                meminfo[key] = int(rest.split()[0]) // 1024
    load1, load5, _ = os.getloadavg()
    return {"cpu_model": model, "cpu_count": os.cpu_count() or 1, "load_1m": load1,
            "load_5m": load5, "memory_total_mb": meminfo.get("MemTotal"),
            "memory_available_mb": meminfo.get("MemAvailable")}


class GpuTelemetry:
    """NVML readings of every GPU, or the one-line reason there are none."""

    def __init__(self) -> None:
        self.unavailable: str | None = None
        self._handles: list[Any] = []
        self._names: list[str] = []
        try:
            with warnings.catch_warnings():  # pynvml 13 is a shim that asks for nvidia-ml-py
                warnings.simplefilter("ignore", FutureWarning)
                import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._names = [str(pynvml.nvmlDeviceGetName(h)) for h in self._handles]
            if not self._handles:
                self.unavailable = "NVML found no GPU"
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, NoPermission
            self.unavailable = f"no NVIDIA GPU telemetry ({type(exc).__name__}: {exc})"

    @property
    def available(self) -> bool:
        return self.unavailable is None

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def read(self) -> list[GpuReading]:
        if not self.available:
            return []
        import pynvml

        def optional(call: Callable[..., Any], *args: Any) -> Any:
            """None where the device does not support the query (not 0: that is a value)."""
            try:
                return call(*args)
            except pynvml.NVMLError:
                return None

        now = time.time()
        readings = []
        for index, handle in enumerate(self._handles):
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            reasons = optional(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle)
            energy = optional(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            ecc = optional(pynvml.nvmlDeviceGetTotalEccErrors, handle,
                           pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
            replays = optional(pynvml.nvmlDeviceGetPcieReplayCounter, handle)
            mem_clock = optional(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM)
            power = optional(pynvml.nvmlDeviceGetPowerUsage, handle)
            power_limit = optional(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            readings.append(GpuReading(
                at=now, index=index, name=self._names[index],
                temperature_c=float(pynvml.nvmlDeviceGetTemperature(
                    handle, pynvml.NVML_TEMPERATURE_GPU)),
                sm_clock_mhz=float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                max_sm_clock_mhz=float(pynvml.nvmlDeviceGetMaxClockInfo(
                    handle, pynvml.NVML_CLOCK_SM)),
                mem_clock_mhz=None if mem_clock is None else float(mem_clock),
                utilization_pct=float(util.gpu),
                memory_used_mb=memory.used / 2**20, memory_free_mb=memory.free / 2**20,
                memory_total_mb=memory.total / 2**20,
                power_w=(power or 0) / 1000, power_limit_w=(power_limit or 0) / 1000,
                energy_mj=None if energy is None else float(energy),
                clock_event_reasons=int(reasons or 0),
                ecc_uncorrected=None if ecc is None else int(ecc), xid_last=None,
                pcie_replays=None if replays is None else int(replays)))
        return readings


class Sampler:
    """Reads telemetry about once a second on a thread and keeps the latest readings."""

    def __init__(self, gpu: GpuTelemetry, period_s: float = 1.0) -> None:
        self.gpu = gpu
        self.period_s = period_s
        self._kept: deque[GpuReading] = deque(maxlen=MAX_KEPT)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self.cpu: dict[str, Any] = cpu_facts()
        self.sample_cost_s = 0.0  # CPU seconds of the last sampling round

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            began = time.thread_time()
            readings = self.gpu.read()
            cpu = cpu_facts()
            with self._lock:
                self._kept.extend(readings)
                self.cpu = cpu
            self.sample_cost_s = time.thread_time() - began

    def drain(self) -> list[GpuReading]:
        """Readings since the last drain (for one telemetry batch)."""
        with self._lock:
            taken = list(self._kept)
            self._kept.clear()
        return taken

    def summary(self) -> dict[str, Any]:
        """One heartbeat's worth: the CPU facts, and the GPU's only when there is one."""
        with self._lock:
            latest = self._kept[-1] if self._kept else None
            summary: dict[str, Any] = {"cpu": dict(self.cpu)}
        if self.gpu.available:
            summary["gpu"] = None if latest is None else asdict(latest)
        else:
            summary["gpu_unavailable"] = self.gpu.unavailable
        return summary
