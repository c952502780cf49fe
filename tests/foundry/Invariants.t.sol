// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IStakeManager} from "../../contracts/interfaces/IStakeManager.sol";
import {IJobEscrow} from "../../contracts/interfaces/IJobEscrow.sol";
import {IDisputes} from "../../contracts/interfaces/IDisputes.sol";
import {TestToken} from "../../contracts/test/TestToken.sol";
import {Base} from "./Base.sol";
import {Handler} from "./Handler.sol";

/// @notice The contracts' rules (contracts/README.md), checked after every step of random
/// sequences over every external function with time travel. `make test` runs 20 runs of 500
/// steps (10,000); `make fuzz` runs the `fuzz` profile (100 x 1,000 = 100,000).
contract InvariantsTest is Base {
    Handler internal handler;

    function setUp() public {
        _deploy(new TestToken());
        handler = new Handler(token, sm, escrow, disputes, admin, orchestrator, arbiter);
    }

    function targetContracts() public view returns (address[] memory targets) {
        targets = new address[](1);
        targets[0] = address(handler);
    }

    /// Every rule the handler checks on the way (a lock pays only after requestedAt + period and
    /// never slashed stake; collateral is slashable until closedAt + slash window and released
    /// only after; settle at most once, never after deadline + grace; settle and reclaim never
    /// both; disputes name a backer and freeze at most the job's amount, at most its payout from
    /// payees; the arbiter slashes at most the disputed payout; score findings: never self-found,
    /// never copied, never stale, never sized on stake added after the commit; parameters stay in
    /// bounds).
    function invariant_rulesHold() public view {
        string memory broken = handler.violation();
        if (bytes(broken).length != 0) revert(broken);
    }

    /// A payout settled at t is claimable by t + window + one day (unless frozen by a dispute
    /// about it) and never before t + window; a dispute's winner claims at once; a dismissed
    /// freeze returns to the rest of its job's window.
    function invariant_payoutsMatureOnTime() public view {
        address[] memory all = handler.everyone();
        for (uint256 i; i < all.length; ++i) {
            address a = all[i];
            Handler.Credit[] memory credits = handler.creditsOf(a);
            uint256 must;
            uint256 may;
            for (uint256 k; k < credits.length; ++k) {
                if (credits[k].latest <= block.timestamp) must += credits[k].amount;
                if (credits[k].earliest <= block.timestamp) may += credits[k].amount;
            }
            uint256 frozen = handler.frozenFrom(a);
            must = must > frozen ? must - frozen : 0;
            uint256 have = escrow.balanceOf(a).claimable + handler.claimed(a);
            assertLe(must, have, "a payout past its time is not claimable");
            assertLe(have, may, "a payout is claimable before its window ended");
        }
    }

    /// Stake only changes by staking, withdrawing and slashing (net of reversals).
    function invariant_stakeAddsUp() public view {
        for (uint256 i; i < 3; ++i) {
            address p = handler.providers(i);
            IStakeManager.StakeInfo memory info = sm.stakeOf(p);
            assertEq(
                info.bonded + info.unbonding,
                handler.staked(p) - handler.withdrawn(p) - handler.slashedAway(p),
                "stake moved without a stake, withdrawal or slash"
            );
            assertLe(info.locked, info.bonded, "more collateral locked than bonded");
        }
    }

    /// Every token each contract holds is owed to someone in its books.
    function invariant_balancesAddUp() public view {
        uint256 books;
        for (uint256 i; i < 3; ++i) {
            IStakeManager.StakeInfo memory info = sm.stakeOf(handler.providers(i));
            books += info.bonded + info.unbonding;
        }
        uint256[] memory slashIds = handler.slashIds();
        for (uint256 i; i < slashIds.length; ++i) {
            IStakeManager.Slash memory s = sm.slashOf(slashIds[i]);
            if (s.status == IStakeManager.SlashStatus.Pending || s.status == IStakeManager.SlashStatus.Frozen) {
                books += uint256(s.amount) + s.finderAmount;
            }
        }
        assertEq(token.balanceOf(address(sm)), books, "StakeManager balance != stakes + pending slashes");

        books = 0;
        for (uint256 i; i < handler.jobCount(); ++i) {
            IJobEscrow.Job memory job = escrow.jobOf(handler.jobAt(i).id);
            if (job.status == IJobEscrow.JobStatus.Funded) books += job.amount;
            if (job.status == IJobEscrow.JobStatus.Settled) books += job.refund;
        }
        address[] memory all = handler.everyone();
        for (uint256 i; i < all.length; ++i) {
            IJobEscrow.Balance memory b = escrow.balanceOf(all[i]);
            books += b.claimable + b.pending + b.frozen;
        }
        assertEq(token.balanceOf(address(escrow)), books, "JobEscrow balance != escrows + refunds + payouts");

        books = 0;
        for (uint256 i; i < handler.disputeCount(); ++i) {
            IDisputes.Dispute memory d = disputes.disputeOf(handler.disputeAt(i).id);
            if (d.status == IDisputes.DisputeStatus.Open) books += d.bond;
        }
        assertEq(token.balanceOf(address(disputes)), books, "Disputes balance != open bonds");
    }

    /// No money is locked without a way out: at the end of every run, everyone takes out
    /// everything they can (after waiting out every period), and all three contracts end empty.
    function afterInvariant() public {
        vm.warp(block.timestamp + 60 days);
        vm.roll(block.number + 10);
        for (uint256 i; i < handler.disputeCount(); ++i) {
            uint256 id = handler.disputeAt(i).id;
            if (disputes.disputeOf(id).status == IDisputes.DisputeStatus.Open) disputes.applyDefaultRuling(id);
        }
        uint256[] memory slashIds = handler.slashIds();
        for (uint256 i; i < slashIds.length; ++i) {
            if (sm.slashOf(slashIds[i]).status == IStakeManager.SlashStatus.Pending) sm.releaseSlash(slashIds[i]);
        }
        vm.warp(block.timestamp + 60 days);
        for (uint256 i; i < handler.jobCount(); ++i) {
            bytes32 id = handler.jobAt(i).id;
            IJobEscrow.Job memory job = escrow.jobOf(id);
            if (job.status == IJobEscrow.JobStatus.Funded) {
                vm.prank(job.customer);
                escrow.reclaim(id);
            } else if (job.status == IJobEscrow.JobStatus.Settled && job.refund != 0) {
                escrow.claimRefund(id);
            }
            for (uint256 k; k < 3; ++k) escrow.releaseCollateral(id, _one(handler.providers(k)));
        }
        address[] memory all = handler.everyone();
        for (uint256 i; i < all.length; ++i) {
            if (escrow.balanceOf(all[i]).claimable != 0) {
                vm.prank(all[i]);
                escrow.claim();
            }
        }
        for (uint256 round; round < 2; ++round) {
            for (uint256 i; i < 3; ++i) {
                address p = handler.providers(i);
                uint64[] memory open = sm.openLocks(p);
                for (uint256 k; k < open.length; ++k) {
                    vm.prank(p);
                    sm.withdraw(open[k]);
                }
                uint256 bonded = sm.stakeOf(p).bonded;
                if (round == 0 && bonded != 0) {
                    vm.prank(p);
                    sm.requestUnbond(bonded);
                }
            }
            vm.warp(block.timestamp + sm.MAX_PERIOD());
        }
        assertEq(token.balanceOf(address(sm)), 0, "stake left locked in the StakeManager");
        assertEq(token.balanceOf(address(escrow)), 0, "money left locked in the JobEscrow");
        assertEq(token.balanceOf(address(disputes)), 0, "bonds left locked in Disputes");
    }
}
