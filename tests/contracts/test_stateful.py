"""Stateful property test: random sequences of stake / unbond / withdraw / create / lock / settle /
slash / dispute / reclaim / claim with time travel, checking money conservation and the safety
rules after every step. `make fuzz` runs it with MESH_FUZZ_EXAMPLES=2000."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import ape
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from .conftest import FUZZ_EXAMPLES, TOKEN, Mesh, job_id

STEPS = int(os.environ.get("MESH_FUZZ_STEPS", "25"))
FUNDED, SETTLED, RECLAIMED = 1, 2, 3
SLASH_PENDING, SLASH_FROZEN = 1, 2
EVIDENCE = b"\x55" * 32
MAX = 2**256 - 1


@dataclass
class JobModel:
    customer: Any
    amount: int
    status: int = FUNDED
    locked: set[str] = field(default_factory=set)  # provider addresses with collateral


def make_machine(mesh: Mesh, accounts: Any, chain: Any) -> type[RuleBasedStateMachine]:
    providers = [accounts[5], accounts[6], accounts[7]]
    customers = [accounts[4], accounts[8]]
    finder = accounts[9]
    sm, escrow, disputes, token = mesh.stake_manager, mesh.escrow, mesh.disputes, mesh.token
    orchestrator, arbiter = mesh.orchestrator, mesh.arbiter
    everyone = [*providers, *customers, finder, mesh.treasury]
    by_address = {p.address: p for p in providers}

    class MeshMachine(RuleBasedStateMachine):
        """The chain is the state; the model only tracks ids and what each job has locked."""

        def __init__(self) -> None:
            super().__init__()
            self.snapshot = chain.snapshot()
            self.jobs: dict[bytes, JobModel] = {}
            self.locks: dict[str, list[int]] = {p.address: [] for p in providers}  # open lock ids
            self.next_lock: dict[str, int] = {p.address: 0 for p in providers}
            self.slash_ids: list[int] = []
            self.open_disputes: list[int] = []
            self.counter = 0

        def teardown(self) -> None:
            chain.restore(self.snapshot)

        @initialize()
        def fund_everyone(self) -> None:
            for who in everyone:
                if token.balanceOf(who) < 10_000 * TOKEN:
                    token.mint(who, 10_000 * TOKEN, sender=who)
                for spender in (sm, escrow, disputes):
                    if token.allowance(who, spender) < 10**30:
                        token.approve(spender, MAX, sender=who)

        # ------------------------------------------------------------ provider rules

        @rule(p=st.sampled_from(providers), amount=st.integers(1, 500))
        def stake(self, p: Any, amount: int) -> None:
            sm.stake(amount * TOKEN, sender=p)

        @rule(p=st.sampled_from(providers), share=st.integers(1, 100))
        def request_unbond(self, p: Any, share: int) -> None:
            info = sm.stakeOf(p)
            free = info.bonded - info.locked
            if free == 0:
                return
            sm.requestUnbond(max(1, free * share // 100), sender=p)
            self.locks[p.address].append(self.next_lock[p.address])
            self.next_lock[p.address] += 1

        @rule(p=st.sampled_from(providers), pick=st.integers(0, 10))
        def withdraw(self, p: Any, pick: int) -> None:
            open_locks = self.locks[p.address]
            if not open_locks:
                return
            lock_id = open_locks[pick % len(open_locks)]
            lock = sm.unbondingLock(p, lock_id)
            if chain.pending_timestamp < lock.withdrawableAt:
                with ape.reverts(sm.StakeManagerUnbondingNotEnded):  # no stake leaves early
                    sm.withdraw(lock_id, sender=p)
                return
            expected = min(lock.amount, sm.stakeOf(p).unbonding)
            before = token.balanceOf(p)
            sm.withdraw(lock_id, sender=p)
            assert token.balanceOf(p) - before == expected
            self.locks[p.address].remove(lock_id)

        @rule(p=st.sampled_from(providers), pick=st.integers(0, 10))
        def cancel_unbond(self, p: Any, pick: int) -> None:
            open_locks = self.locks[p.address]
            if not open_locks:
                return
            lock_id = open_locks[pick % len(open_locks)]
            sm.cancelUnbond(lock_id, sender=p)
            self.locks[p.address].remove(lock_id)

        # ------------------------------------------------------------ job rules

        @rule(c=st.sampled_from(customers), amount=st.integers(1, 300), hours=st.integers(1, 48))
        def create_job(self, c: Any, amount: int, hours: int) -> None:
            self.counter += 1
            jid = job_id(f"fuzz-{self.counter}-{chain.pending_timestamp}")
            escrow.createJob(
                jid, amount * TOKEN, chain.pending_timestamp + hours * 3600, EVIDENCE, sender=c
            )
            self.jobs[jid] = JobModel(c, amount * TOKEN)

        def _jobs_with(self, status: int) -> list[bytes]:
            return [j for j, m in self.jobs.items() if m.status == status]

        @precondition(lambda self: self._jobs_with(FUNDED))
        @rule(pick=st.integers(0, 100), p=st.sampled_from(providers), share=st.integers(1, 50))
        def lock_collateral(self, pick: int, p: Any, share: int) -> None:
            funded = self._jobs_with(FUNDED)
            jid = funded[pick % len(funded)]
            info = sm.stakeOf(p)
            free = info.bonded - info.locked
            if free == 0:
                return
            escrow.lockCollateral(jid, [p], [max(1, free * share // 100)], sender=orchestrator)
            self.jobs[jid].locked.add(p.address)

        @precondition(lambda self: self._jobs_with(FUNDED))
        @rule(pick=st.integers(0, 100), p=st.sampled_from(providers), pay=st.integers(0, 110))
        def settle(self, pick: int, p: Any, pay: int) -> None:
            funded = self._jobs_with(FUNDED)
            jid = funded[pick % len(funded)]
            model = self.jobs[jid]
            payout = model.amount * pay // 100
            listed = sorted(model.locked | {p.address})
            payouts = [payout if a == p.address else 0 for a in listed]
            if payout > model.amount:  # no payout exceeds escrow
                with ape.reverts(escrow.JobEscrowPayoutExceedsEscrow):
                    escrow.settle(jid, listed, payouts, EVIDENCE, sender=orchestrator)
                return
            escrow.settle(jid, listed, payouts, EVIDENCE, sender=orchestrator)
            model.status, model.locked = SETTLED, set()

        @precondition(lambda self: self._jobs_with(SETTLED))
        @rule(pick=st.integers(0, 100))
        def settle_again(self, pick: int) -> None:
            settled = self._jobs_with(SETTLED)
            jid = settled[pick % len(settled)]
            with ape.reverts(escrow.JobEscrowAlreadySettled, jobId=jid):  # each job settles once
                escrow.settle(jid, [], [], EVIDENCE, sender=orchestrator)

        @precondition(lambda self: self._jobs_with(FUNDED))
        @rule(pick=st.integers(0, 100))
        def reclaim(self, pick: int) -> None:
            funded = self._jobs_with(FUNDED)
            jid = funded[pick % len(funded)]
            model = self.jobs[jid]
            if chain.pending_timestamp <= escrow.jobOf(jid).deadline + escrow.gracePeriod():
                with ape.reverts(escrow.JobEscrowNotReclaimableYet):
                    escrow.reclaim(jid, sender=model.customer)
                return
            escrow.reclaim(jid, sender=model.customer)
            escrow.releaseCollateral(jid, sorted(model.locked), sender=finder)
            model.status, model.locked = RECLAIMED, set()

        @rule(who=st.sampled_from(everyone))
        def claim(self, who: Any) -> None:
            if escrow.balanceOf(who).claimable:
                escrow.claim(sender=who)

        @precondition(lambda self: self._jobs_with(SETTLED))
        @rule(pick=st.integers(0, 100))
        def claim_refund(self, pick: int) -> None:
            settled = self._jobs_with(SETTLED)
            jid = settled[pick % len(settled)]
            job = escrow.jobOf(jid)
            if job.refund and chain.pending_timestamp >= job.settledAt + escrow.disputeWindow():
                escrow.claimRefund(jid, sender=finder)

        # ------------------------------------------------------------ slashing and disputes

        @rule(p=st.sampled_from(providers), amount=st.integers(1, 2_000))
        def slash(self, p: Any, amount: int) -> None:
            info = sm.stakeOf(p)
            slashable = info.bonded - info.locked + info.unbonding
            if slashable == 0:
                return
            sm.slash(p, amount * TOKEN, 3, EVIDENCE, sender=orchestrator)
            slash_id = sm.slashCount()
            assert sm.slashOf(slash_id).amount == min(
                amount * TOKEN, slashable
            )  # never beyond stake
            self.slash_ids.append(slash_id)

        @precondition(lambda self: any(self.jobs[j].locked for j in self._jobs_with(FUNDED)))
        @rule(pick=st.integers(0, 100), amount=st.integers(1, 500))
        def slash_collateral(self, pick: int, amount: int) -> None:
            candidates = [j for j in self._jobs_with(FUNDED) if self.jobs[j].locked]
            jid = candidates[pick % len(candidates)]
            provider = sorted(self.jobs[jid].locked)[0]
            locked = sm.lockedFor(jid, provider)
            if locked == 0:
                return
            sm.slashCollateral(jid, provider, amount * TOKEN, 1, EVIDENCE, sender=orchestrator)
            self.slash_ids.append(sm.slashCount())
            assert sm.lockedFor(jid, provider) == locked - min(locked, amount * TOKEN)

        @precondition(lambda self: self.slash_ids)
        @rule(pick=st.integers(0, 100), dispute=st.booleans())
        def act_on_slash(self, pick: int, dispute: bool) -> None:
            slash_id = self.slash_ids[pick % len(self.slash_ids)]
            record = sm.slashOf(slash_id)
            if record.status != SLASH_PENDING:
                return
            in_window = chain.pending_timestamp < record.releasableAt
            if dispute and in_window:
                disputes.disputeSlash(slash_id, EVIDENCE, sender=by_address[record.provider])
                self.open_disputes.append(disputes.disputeCount())
            elif not in_window:
                sm.releaseSlash(slash_id, sender=finder)

        @precondition(lambda self: self._jobs_with(SETTLED))
        @rule(pick=st.integers(0, 100), p=st.sampled_from(providers), share=st.integers(1, 100))
        def dispute_settlement(self, pick: int, p: Any, share: int) -> None:
            settled = self._jobs_with(SETTLED)
            jid = settled[pick % len(settled)]
            job = escrow.jobOf(jid)
            balance = escrow.balanceOf(p)
            if (
                chain.pending_timestamp >= job.settledAt + escrow.disputeWindow()
                or balance.pending == 0
            ):
                return
            amount = max(1, min(balance.pending, job.amount) * share // 100)
            disputes.disputeSettlement(jid, p, amount, EVIDENCE, sender=self.jobs[jid].customer)
            self.open_disputes.append(disputes.disputeCount())

        @precondition(lambda self: self.open_disputes)
        @rule(pick=st.integers(0, 100), granted=st.booleans(), slash_amount=st.integers(0, 50))
        def resolve_dispute(self, pick: int, granted: bool, slash_amount: int) -> None:
            dispute_id = self.open_disputes.pop(pick % len(self.open_disputes))
            dispute = disputes.disputeOf(dispute_id)
            if chain.pending_timestamp > dispute.rulingDeadline:
                disputes.applyDefaultRuling(dispute_id, sender=finder)
                return
            amount = 0
            if granted and dispute.kind == 0:
                info = sm.stakeOf(dispute.respondent)
                if info.bonded - info.locked + info.unbonding >= slash_amount * TOKEN:
                    amount = slash_amount * TOKEN
            disputes.rule(dispute_id, granted, amount, EVIDENCE, sender=arbiter)
            if amount:
                self.slash_ids.append(sm.slashCount())

        @rule(seconds=st.sampled_from([60, 3_600, 86_400, 2 * 86_400, 8 * 86_400]))
        def advance_time(self, seconds: int) -> None:
            chain.pending_timestamp += seconds
            chain.mine()

        # ------------------------------------------------------------ invariants

        @invariant()
        def money_is_conserved(self) -> None:
            stakes = [sm.stakeOf(p) for p in providers]
            pending_slashes = 0
            for slash_id in range(1, sm.slashCount() + 1):
                record = sm.slashOf(slash_id)
                if record.status in (SLASH_PENDING, SLASH_FROZEN):
                    pending_slashes += record.amount + record.finderAmount
            assert (
                token.balanceOf(sm) == sum(s.bonded + s.unbonding for s in stakes) + pending_slashes
            )

            escrowed = 0
            for jid in self.jobs:
                job = escrow.jobOf(jid)
                escrowed += (
                    job.amount
                    if job.status == FUNDED
                    else job.refund
                    if job.status == SETTLED
                    else 0
                )
            owed = sum(
                b.claimable + b.pending + b.frozen for b in (escrow.balanceOf(a) for a in everyone)
            )
            assert token.balanceOf(escrow) == escrowed + owed

            bonds = sum(
                d.bond
                for d in (disputes.disputeOf(i) for i in range(1, disputes.disputeCount() + 1))
                if d.status == 1
            )
            assert token.balanceOf(disputes) == bonds

        @invariant()
        def collateral_matches_the_job_locks(self) -> None:
            for p in providers:
                info = sm.stakeOf(p)
                assert info.locked <= info.bonded
                locked = sum(
                    sm.lockedFor(jid, p) for jid, m in self.jobs.items() if p.address in m.locked
                )
                assert info.locked == locked

    return MeshMachine


def test_stateful_mesh_conserves_money_and_keeps_safety_rules(
    mesh: Mesh, accounts: Any, chain: Any
) -> None:
    machine = make_machine(mesh, accounts, chain)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=FUZZ_EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
