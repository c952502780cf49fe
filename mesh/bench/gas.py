"""Gas of every money path, read from receipts on a fresh anvil (`mesh bench gas --json`).

Batch numbers are amortised per job, one provider per job, 100 distinct providers, sent as
`settleBatchSolo` (the SDK picks the packed form when every job has one provider). The
headline `settle_batch_*_per_job` is the steady state of a grid: providers that have been
paid before. `settle_batch_100_per_job_first_payout` is the case where every job pays a
provider for the first time ever; it is reported beside it, and so is
`settle_batch_100_per_job_10_providers` (100 jobs over 10 repeat providers, whose storage is
warm after their first job in the batch).

`end_to_end_per_job_batch_N` is what the orchestrator pays per job as its outbox sends it
(the same typed actions, encoded and signed by `chain.outbox_tx.OutboxChain`): N `assign`
rows as one `commitAssignments` root, N `settle` rows as one settle batch, and one
`commitEpoch` for those N jobs (an epoch per batch: more jobs per epoch only lower it),
over providers whose standing reservations are in place. The reservations themselves are
raised rarely (when open work outgrows them, or half their time is gone);
`end_to_end_per_job_batch_100_with_reservations` adds one fresh reservation per job's
provider, the worst case of every provider raising for every batch.
"""

from __future__ import annotations

from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import keccak
from hexbytes import HexBytes

from orchestrator.chain.anvil import (
    Anvil,
    dev_account,
    increase_time,
    opcode_breakdown,
    set_balance,
)
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.outbox_tx import OutboxChain
from orchestrator.chain.sdk import MeshAccount, MeshChain, Settlement
from orchestrator.chain.tx import Receipt, SignedTx, connect
from orchestrator.domain.chain_actions import (
    AssignCollateral,
    CommitEpoch,
    ProveAssignment,
    ReserveCollateral,
    SettleJob,
    SlashCollateral,
)
from orchestrator.domain.types import SlashReason
from orchestrator.services.outbox.config import SenderConfig

TARGETS = {"settle": 80_000, "settle_batch_100_per_job": 15_000,
           "end_to_end_per_job_batch_100": 20_000}
PROVIDERS = 100
STAKE = 1_000 * 10**18
PAYMENT = 10 * 10**18
COLLATERAL = 5 * 10**18
RESERVATION = 100 * 10**18
BATCHES = (1, 10, 100)


def _bench_key(index: int) -> LocalAccount:
    return Account.from_key(keccak(text=f"depin-mesh gas bench provider {index}"))


class _Bench:
    def __init__(self, chain: MeshChain) -> None:
        self.chain = chain
        admin = chain.account(dev_account(0))
        self.orchestrator = chain.account(dev_account(1))
        self.outbox = OutboxChain(chain, self.orchestrator)
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
        self._epoch = 0
        self.batch_100_tx = ""
        self.first_payout_tx = ""

    def new_job(self) -> tuple[bytes, Receipt]:
        self._jobs += 1
        job_id = keccak(text=f"gas bench job {self._jobs}")
        deadline = int(self.chain.w3.eth.get_block("latest")["timestamp"]) + 3600
        return job_id, self.customer.create_job(job_id, PAYMENT, deadline, keccak(job_id))

    def funded_jobs(self, count: int, spread: int) -> list[tuple[bytes, MeshAccount]]:
        """`count` funded jobs over the first `spread` providers (backed by reservations)."""
        return [(self.new_job()[0], self.providers[index % spread]) for index in range(count)]

    def settle_batch(self, count: int, spread: int = PROVIDERS) -> Receipt:
        settlements = [Settlement(job_id, (provider.address,), (PAYMENT,), keccak(job_id))
                       for job_id, provider in self.funded_jobs(count, spread)]
        return self.orchestrator.settle_batch(settlements)

    def until(self) -> int:
        return int(self.chain.w3.eth.get_block("latest")["timestamp"]) + 7 * 24 * 3600

    def _at(self, account: MeshAccount) -> dict[str, Any]:
        """The nonce and fees the outbox's sender would sign with now (nothing in flight)."""
        sender = account.sender
        return {"nonce": sender.nonce_count("pending"),
                "fees": SenderConfig().fees.initial(sender.next_base_fee())}

    def _sent(self, signed: SignedTx) -> int:
        """Broadcast what the outbox signed; the gas its receipt shows."""
        self.outbox.broadcast(signed.raw)
        receipt = self.chain.w3.eth.wait_for_transaction_receipt(HexBytes(signed.tx_hash))
        if receipt["status"] != 1:
            raise RuntimeError(f"{signed.tx_hash} reverted")
        return int(receipt["gasUsed"])

    def end_to_end(self, count: int) -> tuple[int, int]:
        """(per job, per reservation) of `count` jobs on distinct providers, as the outbox sends."""
        jobs = self.funded_jobs(count, PROVIDERS)
        reserve = sum(self._sent(self.outbox.sign(
            ReserveCollateral(provider=p.address, amount=RESERVATION, until=self.until()),
            **self._at(self.orchestrator)))
            for _, p in jobs[:1])  # one extension, priced alone: not part of the batch
        assigns = [AssignCollateral(job_id=j, provider=p.address, placement=k + 1,
                                    collateral=COLLATERAL) for k, (j, p) in enumerate(jobs)]
        settles = [SettleJob(job_id=j, providers=(p.address,), payouts=(PAYMENT,),
                             merkle_root=keccak(j)) for j, p in jobs]
        self._epoch += 1
        gas = self._sent(self.outbox.sign_assignments(assigns, **self._at(self.orchestrator)))
        gas += self._sent(self.outbox.sign_settlements(settles, **self._at(self.orchestrator)))
        gas += self._sent(self.outbox.sign(CommitEpoch(
            epoch=self._epoch, root=keccak(text=f"epoch {self._epoch}")),
            **self._at(self.orchestrator)))
        return gas // count, reserve

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

        addresses = [provider.address for provider in self.providers]
        gas["reserve_1"] = self.orchestrator.reserve_collateral(
            [first.address], [RESERVATION], self.until()).gas_used
        gas["reserve_100_per_provider"] = self.orchestrator.reserve_collateral(
            addresses, [RESERVATION] * PROVIDERS, self.until()).gas_used // PROVIDERS

        job_id, receipt = self.new_job()
        gas["create_job"] = receipt.gas_used
        gas["lock_1"] = self.orchestrator.lock_collateral(
            job_id, [first.address], [COLLATERAL]).gas_used
        gas["settle"] = self.orchestrator.settle(
            job_id, [first.address], [PAYMENT], keccak(job_id)).gas_used

        wide_job, _ = self.new_job()
        gas["lock_100"] = self.orchestrator.lock_collateral(
            wide_job, addresses, [COLLATERAL] * PROVIDERS).gas_used
        # Settled paying nothing, and its locks released once its collateral slash window
        # closed: the batches below see providers without job locks (as the orchestrator's
        # are) that were never paid, so a first payout creates their ledger slot.
        self.orchestrator.settle(wide_job, addresses, [0] * PROVIDERS, keccak(wide_job))
        window = int(self.chain.job_escrow.functions.collateralSlashWindow().call())
        increase_time(self.chain.w3, window + 1)
        self.orchestrator.release_collateral(job_id, [first.address])
        self.orchestrator.release_collateral(wide_job, addresses)

        first_payouts = self.settle_batch(100)
        gas["settle_batch_100_per_job_first_payout"] = first_payouts.gas_used // 100
        self.first_payout_tx = first_payouts.tx_hash
        gas["settle_batch_10_per_job"] = self.settle_batch(10).gas_used // 10
        batch = self.settle_batch(100)
        gas["settle_batch_100_per_job"] = batch.gas_used // 100
        self.batch_100_tx = batch.tx_hash
        concentrated = self.settle_batch(100, spread=10)
        gas["settle_batch_100_per_job_10_providers"] = concentrated.gas_used // 100

        gas.update(self.assignment_paths())
        for count in BATCHES:
            per_job, reserve = self.end_to_end(count)
            gas[f"end_to_end_per_job_batch_{count}"] = per_job
        gas["end_to_end_per_job_batch_100_with_reservations"] = (
            gas["end_to_end_per_job_batch_100"] + gas["reserve_100_per_provider"])
        gas["reserve_extend_1"] = reserve
        return gas

    def assignment_paths(self) -> dict[str, int]:
        """A 100-leaf root, a proof of one leaf, and the abandonment slash it enables."""
        jobs = self.funded_jobs(100, PROVIDERS)
        assigns = [AssignCollateral(job_id=j, provider=p.address, placement=k + 1,
                                    collateral=COLLATERAL) for k, (j, p) in enumerate(jobs)]
        paths = {"commit_assignments": self._sent(self.outbox.sign_assignments(
            assigns, **self._at(self.orchestrator)))}
        job_id, provider = jobs[0]
        paths["prove_assignment"] = self._sent(self.outbox.sign_proof(
            ProveAssignment(job_id=job_id, provider=provider.address, placement=1), assigns,
            **self._at(self.orchestrator)))
        slasher_key = self.chain.account(dev_account(2))
        slasher = OutboxChain(self.chain, self.orchestrator, slasher_key)
        paths["slash_assigned_collateral"] = self._sent(slasher.sign(SlashCollateral(
            job_id=job_id, provider=provider.address, placement=1, amount=COLLATERAL,
            reason=int(SlashReason.ABANDONMENT), evidence=keccak(job_id)),
            **self._at(slasher_key)))
        return paths


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
