from __future__ import annotations

from orchestrator.domain.matching import Candidate, eligible, rank
from orchestrator.domain.types import NodeSpec, Priority, TaskNeeds, Tier


def node(node_id: str = "n1", **overrides: object) -> NodeSpec:
    fields: dict[str, object] = {
        "node_id": node_id, "provider": "0x" + "1" * 40, "gpu_model": "RTX4090", "vram_gb": 24,
        "compute_capability": 8.9, "region": "eu", "price_per_gpu_hour": 100, "slots": 2,
        "tier": Tier.STANDARD}
    fields.update(overrides)
    return NodeSpec(**fields)  # type: ignore[arg-type]


def test_eligible_whenEveryNeedIsMet() -> None:
    needs = TaskNeeds(min_vram_gb=24, gpu_models=frozenset({"RTX4090"}),
                      regions=frozenset({"eu"}), max_price_per_gpu_hour=100)
    assert eligible(node(), needs)


def test_eligible_refusesEachUnmetNeed() -> None:
    assert not eligible(node(vram_gb=16), TaskNeeds(min_vram_gb=24))
    assert not eligible(node(gpu_model="A100"), TaskNeeds(gpu_models=frozenset({"RTX4090"})))
    assert not eligible(node(region="us"), TaskNeeds(regions=frozenset({"eu"})))
    assert not eligible(node(price_per_gpu_hour=101), TaskNeeds(max_price_per_gpu_hour=100))
    assert not eligible(node(), TaskNeeds(providers=frozenset({"0x" + "2" * 40})))


def test_eligible_keepsASensitiveJobOnItsNamedProviders() -> None:
    trusted = frozenset({"0x" + "1" * 40, "0x" + "3" * 40})
    assert eligible(node(), TaskNeeds(providers=trusted, regions=frozenset({"eu"})))
    assert not eligible(node(region="us"), TaskNeeds(providers=trusted,
                                                     regions=frozenset({"eu"})))


def test_eligible_neverGivesATaskBackToAProviderWhoseResultOfItFailed() -> None:
    needs = TaskNeeds(excluded_providers=frozenset({"0x" + "1" * 40}))
    assert not eligible(node(), needs)
    assert eligible(node(provider="0x" + "2" * 40), needs)


def test_eligible_matchesPriorityToTier() -> None:
    assert not eligible(node(tier=Tier.STANDARD), TaskNeeds(priority=Priority.HIGH))
    assert eligible(node(tier=Tier.HIGH), TaskNeeds(priority=Priority.HIGH))
    assert not eligible(node(tier=Tier.BACKGROUND), TaskNeeds(priority=Priority.NORMAL))
    assert eligible(node(tier=Tier.BACKGROUND), TaskNeeds(priority=Priority.LOW))


def test_rank_putsCheaperFirst_thenEmptier_andDropsFullOrIneligible() -> None:
    ranked = rank([
        Candidate(node("pricey", price_per_gpu_hour=200), 2),
        Candidate(node("cheap-busy"), 1),
        Candidate(node("cheap-idle"), 2),
        Candidate(node("full"), 0),
        Candidate(node("small", vram_gb=8), 2),
    ], TaskNeeds(min_vram_gb=16))
    assert [c.spec.node_id for c in ranked] == ["cheap-idle", "cheap-busy", "pricey"]


def test_rank_usesThePluggedScore() -> None:
    ranked = rank([Candidate(node("a"), 1), Candidate(node("b", vram_gb=48), 1)], TaskNeeds(),
                  score=lambda spec, needs: float(spec.vram_gb))
    assert ranked[0].spec.node_id == "b"
