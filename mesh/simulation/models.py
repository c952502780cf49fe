"""Ground-truth models of the world the orchestrator cannot see directly: how long hosts stay
online (published SETI@home fits), what GPUs they carry, and how good their links are."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from orchestrator.domain.popw import DEFAULT_GPU_CLASSES

HOUR_S = 3600.0
TOKEN = 10**18  # token units (wei) per token of the stake/payment ERC-20


@dataclass(frozen=True, slots=True)
class Distribution:
    """One fitted distribution of interval lengths, in hours as the papers publish them."""

    dist: str
    params: dict[str, Any]

    def sample_hours(self, rng: np.random.Generator, size: int) -> np.ndarray:
        p = self.params
        if self.dist == "gamma":
            return rng.gamma(p["shape"], p["scale"], size)
        if self.dist == "weibull":
            return float(p["scale"]) * rng.weibull(p["shape"], size)
        if self.dist == "hyperexponential":
            probs = np.asarray(p["p"], dtype=float)
            rates = np.asarray(p["rate"], dtype=float)
            branch = rng.choice(len(probs), size=size, p=probs / probs.sum())
            return rng.exponential(1.0, size) / rates[branch]
        if self.dist == "lognormal":
            return rng.lognormal(p["mu"], p["sigma"], size)
        raise ValueError(f"unknown distribution {self.dist!r}")

    def mean_hours(self) -> float:
        p = self.params
        if self.dist == "gamma":
            return float(p["shape"] * p["scale"])
        if self.dist == "weibull":
            return float(p["scale"] * math.gamma(1.0 + 1.0 / p["shape"]))
        if self.dist == "hyperexponential":
            return float(sum(w / r for w, r in zip(p["p"], p["rate"], strict=True)))
        if self.dist == "lognormal":
            return float(math.exp(p["mu"] + p["sigma"] ** 2 / 2.0))
        raise ValueError(f"unknown distribution {self.dist!r}")


@dataclass(frozen=True, slots=True)
class AvailabilityModel:
    """Alternating renewal process: online for `availability`, then offline for `unavailability`."""

    name: str
    availability: Distribution
    unavailability: Distribution

    def long_run_uptime(self) -> float:
        on = self.availability.mean_hours()
        return on / (on + self.unavailability.mean_hours())


def _distribution(raw: dict[str, Any]) -> Distribution:
    params = {k: v for k, v in raw.items() if k not in ("dist", "note")}
    return Distribution(dist=raw["dist"], params=params)


def load_availability_models() -> dict[str, AvailabilityModel]:
    """The published fits shipped as package data (source cited inside the JSON file)."""
    text = resources.files("mesh.simulation").joinpath(
        "data/availability_models.json").read_text(encoding="utf-8")
    raw = json.loads(text)["models"]
    return {
        name: AvailabilityModel(name, _distribution(m["availability"]),
                                _distribution(m["unavailability"]))
        for name, m in raw.items()
    }


# Stable, middling and flaky SETI@home host clusters, mixed independently of hardware so that
# every GPU class has both stable and flaky nodes. combos-default is shipped but not mixed in
# by default: its lognormal argument order is unverified (see the note in the JSON file).
DEFAULT_CLUSTER_MIX: dict[str, float] = {
    "seti-cluster-4": 1 / 3,
    "seti-cluster-2": 1 / 3,
    "seti-cluster-6": 1 / 3,
}


@dataclass(frozen=True, slots=True)
class Population:
    """A host population for generated traces: which availability models its hosts follow,
    and how far hosts of one model differ in pace. Each host's online and offline lengths are
    scaled by one factor, `time_scale` times a lognormal draw of spread `pace_spread`, so
    its uptime share stays the model's while its sessions per week vary from host to host
    (home machines: some are switched on and off twice a day, some every other day)."""

    mix: dict[str, float]
    time_scale: float = 1.0
    pace_spread: float = 0.0
    about: str = ""

    def host_scales(self, rng: np.random.Generator, size: int) -> np.ndarray:
        if self.pace_spread == 0.0:
            return np.full(size, self.time_scale)
        return self.time_scale * rng.lognormal(0.0, self.pace_spread, size)


# Not a published fit, so kept out of the data file: home machines switched on for a few
# hours at a time (median 4 h online, 7 h off, lognormal, so a session rarely lasts a day),
# about 12 sessions a week, for the high-churn populations below.
SYNTHETIC_MODELS: dict[str, AvailabilityModel] = {
    "home-evenings": AvailabilityModel(
        "home-evenings", Distribution("lognormal", {"mu": 1.386, "sigma": 0.7}),
        Distribution("lognormal", {"mu": 1.946, "sigma": 0.8})),
}


def population_models() -> dict[str, AvailabilityModel]:
    """Every model a `Population` may name: the published fits and the synthetic ones."""
    return {**load_availability_models(), **SYNTHETIC_MODELS}


# `mesh bench churn --population NAME`. "seti" is the default; the others are high-churn
# populations built on the ComBoS default model (Weibull sessions with a median of about an
# hour, lognormal absences), alone or mixed with the SETI@home clusters.
POPULATIONS: dict[str, Population] = {
    "seti": Population(DEFAULT_CLUSTER_MIX, about="SETI@home clusters 2/4/6, a third each"),
    "combos": Population({"combos-default": 1.0}, pace_spread=0.5,
                         about="ComBoS default model, host pace spread 0.5"),
    "homes": Population({"combos-default": 0.7, "seti-cluster-6": 0.3}, time_scale=0.7,
                        pace_spread=0.5,
                        about="ComBoS .7 + SETI cluster 6 .3, sessions x0.7, spread 0.5"),
    "homes-short": Population({"combos-default": 1.0}, time_scale=0.5, pace_spread=0.4,
                              about="ComBoS default, sessions x0.5 (a few hours), spread 0.4"),
    "churn-mix": Population({"combos-default": 0.6, "seti-cluster-6": 0.2,
                             "seti-cluster-2": 0.1, "seti-cluster-4": 0.1}, time_scale=0.8,
                            pace_spread=0.5,
                            about="ComBoS .6 + SETI 6/2/4 .2/.1/.1, sessions x0.8, spread 0.5"),
    "evenings": Population({"home-evenings": 1.0}, pace_spread=0.3,
                           about="home machines on a few hours at a time, ~12 sessions a week"),
    "evenings-mix": Population({"home-evenings": 0.6, "combos-default": 0.4}, pace_spread=0.3,
                               about="home-evenings .6 + ComBoS .4, spread 0.3"),
}


@dataclass(frozen=True, slots=True)
class GpuClass:
    name: str
    vram_gb: int
    popw_class: str  # the PoPW class a handshake proves (`popw.DEFAULT_GPU_CLASSES`)
    price_milli_tokens: int  # asked per GPU-hour, in thousandths of a token
    share: float  # fraction of generated nodes carrying it

    @property
    def speed(self) -> float:
        """Throughput relative to an RTX 3090 on Cycles renders (the PoPW class's)."""
        return DEFAULT_GPU_CLASSES[self.popw_class].render_speed


GPU_CLASSES: dict[str, GpuClass] = {
    g.name: g
    for g in (
        GpuClass("RTX 3060", 12, "rtx3060", 300, 0.30),
        GpuClass("RTX 3080", 10, "rtx3080", 450, 0.20),
        GpuClass("RTX 3090", 24, "rtx3090", 550, 0.25),
        GpuClass("RTX 4090", 24, "rtx4090", 900, 0.20),
        GpuClass("A100", 80, "a100", 1200, 0.05),
    )
}

REGIONS = ("eu-west", "eu-east", "us-east", "us-west", "ap-south", "ap-east")
NETWORKS_PER_REGION = 4  # ISPs per region: a network outage partitions one of them
THROTTLE_SLOWDOWN = 0.4  # a throttled GPU runs this much slower while throttled


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """Ground truth of one node: hardware, link quality and honesty."""

    node_id: str
    gpu: str
    vram_gb: int
    speed: float
    rtt_ms: float
    jitter_ms: float
    loss: float  # heartbeat/probe packet loss probability
    throttle_rate: float  # fraction of time the GPU is thermally throttled
    upload_mbps: float  # asymmetric links: upload is the slow direction
    region: str
    network: str
    partition_rate_per_day: float  # short ISP partitions (honest blips)
    cheater: bool  # returns bad results now and then (caught by verification)
    stake: int  # token units bonded: what uptime-staking models also reward
    price_per_gpu_hour: int  # token units asked per GPU-hour

    @property
    def effective_speed(self) -> float:
        """Long-run throughput: throttling cycles average out over a task of minutes or hours."""
        return self.speed * (1.0 - THROTTLE_SLOWDOWN * self.throttle_rate)


CHEATER_SHARE = 0.02


def generate_link_fields(
    rng: np.random.Generator, node_id: str, gpu: str, vram_gb: int, *, rtt_ms: float | None = None,
    jitter_ms: float | None = None, loss: float | None = None, throttle_rate: float | None = None,
) -> NodeProfile:
    """A node's profile; fields given (from a profiles CSV) are kept, the rest drawn."""
    gpu_class = GPU_CLASSES[gpu]
    region = REGIONS[int(rng.integers(len(REGIONS)))]
    network = f"{region}/isp{int(rng.integers(NETWORKS_PER_REGION))}"
    poor_link = rng.random() < 0.25
    return NodeProfile(
        node_id=node_id,
        gpu=gpu,
        vram_gb=vram_gb,
        speed=gpu_class.speed,
        rtt_ms=rtt_ms if rtt_ms is not None else float(rng.lognormal(math.log(40.0), 0.5)),
        jitter_ms=jitter_ms if jitter_ms is not None else float(
            rng.lognormal(math.log(30.0 if poor_link else 4.0), 0.6)),
        loss=loss if loss is not None else float(
            rng.uniform(0.005, 0.03) if poor_link else rng.uniform(0.0, 0.004)),
        throttle_rate=throttle_rate if throttle_rate is not None else float(
            rng.beta(1.2, 6.0)),
        upload_mbps=float(rng.lognormal(math.log(8.0 if poor_link else 40.0), 0.5)),
        region=region,
        network=network,
        partition_rate_per_day=float(
            rng.uniform(1.0, 4.0) if poor_link else rng.uniform(0.05, 0.5)),
        cheater=bool(rng.random() < CHEATER_SHARE),
        stake=int(rng.lognormal(math.log(50.0), 0.8) * 1000) * (TOKEN // 1000),
        price_per_gpu_hour=gpu_class.price_milli_tokens * (TOKEN // 1000),
    )


def generate_profiles(rng: np.random.Generator, node_ids: list[str]) -> dict[str, NodeProfile]:
    classes = list(GPU_CLASSES.values())
    shares = np.asarray([g.share for g in classes])
    picks = rng.choice(len(classes), size=len(node_ids), p=shares / shares.sum())
    return {
        node_id: generate_link_fields(rng, node_id, classes[pick].name, classes[pick].vram_gb)
        for node_id, pick in zip(node_ids, picks, strict=True)
    }
