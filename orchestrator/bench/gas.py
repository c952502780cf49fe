"""Gas of every money path, read from receipts on a fresh anvil (`mesh bench gas --json`).

Batch numbers are amortised per job, one provider per job, 100 distinct providers, sent as
`settleBatchSolo` (the SDK picks the packed form when every job has one provider). The
headline `settle_batch_*_per_job` is the steady state of a grid: providers that have been
paid before. `settle_batch_100_per_job_first_payout` is the case where every job pays a
provider for the first time ever (since the payout shares the provider's ledger slot with its
locked collateral, that slot already exists then); it is reported beside it, and so is
`settle_batch_100_per_job_10_providers` (100 jobs over 10 repeat providers, whose storage is
warm after their first job in the batch).
"""

from __future__ import annotations

from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import keccak

from orchestrator.chain.anvil import (
    Anvil,
    dev_account,
    increase_time,
    opcode_breakdown,
    set_balance,
)
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.sdk import MeshAccount, MeshChain, Settlement
from orchestrator.chain.tx import Receipt, connect

TARGETS = {"settle": 80_000, "settle_batch_100_per_job": 15_000}
PROVIDERS = 100
STAKE = 1_000 * 10**18
PAYMENT = 10 * 10**18
COLLATERAL = 5 * 10**18


def _bench_key(index: int) -> LocalAccount:
    return Account.from_key(keccak(text=f"depin-mesh gas bench provider {index}"))


class _Bench:
    def __init__(self, chain: MeshChain) -> None:
        self.chain = chain
        admin = chain.account(dev_account(0))
        self.orchestrator = chain.account(dev_account(1))
        self.customer = chain.account(dev_account(4))
        admin.mint(self.customer.address, 10**9 * 10**18)
        self.providers: list[MeshAccount] = []
        for index in range(PROVIDERS):
            provider = chain.account(_bench_key(index))
            set_balance(chain.w3, provider.address, 10**20)
            admin.mint(provider.address, 2 * STAKE)
            provider.approve(chain.stake_manager.address, 2 * STAKE)
            self.providers.append(provider)
        self.customer.approve(chain.job_escrow.address, 10**9 * 10**18)
        self._jobs = 0
        self.batch_100_tx = ""
        self.first_payout_tx = ""

    def new_job(self) -> tuple[bytes, Receipt]:
        self._jobs += 1
        job_id = keccak(text=f"gas bench job {self._jobs}")
        deadline = int(self.chain.w3.eth.get_block("latest")["timestamp"]) + 3600
        return job_id, self.customer.create_job(job_id, PAYMENT, deadline, keccak(job_id))

    def locked_jobs(self, count: int, spread: int) -> list[tuple[bytes, MeshAccount]]:
        """`count` funded jobs with collateral locked, over the first `spread` providers."""
        jobs = []
        for index in range(count):
            provider = self.providers[index % spread]
            job_id, _ = self.new_job()
            self.orchestrator.lock_collateral(job_id, [provider.address], [COLLATERAL])
            jobs.append((job_id, provider))
        return jobs

    def settle_batch(self, count: int, spread: int = PROVIDERS) -> Receipt:
        settlements = [Settlement(job_id, (provider.address,), (PAYMENT,), keccak(job_id))
                       for job_id, provider in self.locked_jobs(count, spread)]
        return self.orchestrator.settle_batch(settlements)

    def measure(self) -> dict[str, int]:
        gas: dict[str, int] = {}
        first = self.providers[0]
        gas["stake"] = first.stake(STAKE).gas_used
        for provider in self.providers[1:]:
            provider.stake(STAKE)
        lock_id, receipt = first.request_unbond(STAKE // 10)
        gas["request_unbond"] = receipt.gas_used
        increase_time(self.chain.w3, self.chain.unbonding_period())
        gas["withdraw"] = first.withdraw(lock_id).gas_used

        job_id, receipt = self.new_job()
        gas["create_job"] = receipt.gas_used
        gas["lock_1"] = self.orchestrator.lock_collateral(
            job_id, [first.address], [COLLATERAL]).gas_used
        gas["settle"] = self.orchestrator.settle(
            job_id, [first.address], [PAYMENT], keccak(job_id)).gas_used

        wide_job, _ = self.new_job()
        gas["lock_100"] = self.orchestrator.lock_collateral(
            wide_job, [provider.address for provider in self.providers],
            [COLLATERAL] * PROVIDERS).gas_used

        first_payouts = self.settle_batch(100)
        gas["settle_batch_100_per_job_first_payout"] = first_payouts.gas_used // 100
        self.first_payout_tx = first_payouts.tx_hash
        gas["settle_batch_10_per_job"] = self.settle_batch(10).gas_used // 10
        batch = self.settle_batch(100)
        gas["settle_batch_100_per_job"] = batch.gas_used // 100
        self.batch_100_tx = batch.tx_hash
        concentrated = self.settle_batch(100, spread=10)
        gas["settle_batch_100_per_job_10_providers"] = concentrated.gas_used // 100
        return gas


def run() -> dict[str, Any]:
    """Deploy on a fresh anvil and measure; `met` says which targets hold."""
    with Anvil(steps_tracing=True) as anvil:
        w3 = connect(anvil.rpc_url)
        deployment = deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                                  slasher=dev_account(2).address, arbiter=dev_account(3).address)
        bench = _Bench(MeshChain(w3, deployment))
        gas = bench.measure()
        breakdowns = {name: opcode_breakdown(w3, tx) for name, tx in (
            ("settle_batch_100_per_job", bench.batch_100_tx),
            ("settle_batch_100_per_job_first_payout", bench.first_payout_tx))}
    return {
        **gas,
        "targets": TARGETS,
        "met": {name: gas[name] <= limit for name, limit in TARGETS.items()},
        # SSTORE counts before refunds, so the parts can exceed gasUsed ("other" < 0 then).
        "breakdown_per_job": {
            name: {centre: value // 100 for centre, value in breakdown.items()}
            for name, breakdown in breakdowns.items()},
    }
