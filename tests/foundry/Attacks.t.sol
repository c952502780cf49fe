// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

import {IStakeManager} from "../../contracts/interfaces/IStakeManager.sol";
import {IJobEscrow} from "../../contracts/interfaces/IJobEscrow.sol";
import {JobEscrow} from "../../contracts/JobEscrow.sol";
import {TestToken} from "../../contracts/test/TestToken.sol";
import {Compat} from "./Compat.sol";

/// @notice The review's attacks (issue 12), one test each, written as the rule the attack breaks.
/// Each was run against the reviewed contracts first, where it failed (the attack worked).
contract AttacksTest is Compat {
    bytes32 internal constant JOB = keccak256("job");
    uint256 internal constant PAYOUT_PERIOD = 1 days;

    function setUp() public {
        _deploy(new TestToken());
    }

    function _leaf(address who, uint256 scoreBps, bytes32 digest) internal pure returns (bytes32) {
        return keccak256(bytes.concat(keccak256(abi.encode(who, scoreBps, digest))));
    }

    function _commitEpoch(uint64 epoch, address who, uint256 scoreBps) internal {
        vm.prank(orchestrator);
        sm.commitEpoch(epoch, _leaf(who, scoreBps, ROOT)); // a one-leaf tree: root = leaf
    }

    // 1. Nothing leaves a provider's stake before its lock's requestedAt + unbondingPeriod, even
    // after a slash of the unbonding stake was reversed.
    function test_attack01_staleLockCannotDrainANewUnbond() public {
        _stake(provider, 100 * TOKEN);
        vm.prank(provider);
        sm.requestUnbond(100 * TOKEN); // lock 0
        vm.prank(orchestrator);
        uint256 slashId = sm.slash(provider, 100 * TOKEN, IStakeManager.SlashReason.Other, ROOT);
        _fund(provider, BOND);
        vm.prank(provider);
        uint256 disputeId = disputes.disputeSlash(slashId, ROOT);
        vm.prank(arbiter);
        disputes.rule(disputeId, true, 0, ROOT); // reversed: the 100 is bonded again
        _skip(UNBONDING_PERIOD);
        vm.prank(provider);
        sm.requestUnbond(100 * TOKEN); // lock 1, withdrawable in a week
        uint256 before = token.balanceOf(provider);

        vm.prank(provider);
        try sm.withdraw(0) {} catch {}

        assertEq(token.balanceOf(provider), before, "stake left before its unbonding period");
    }

    // 2. A payout settled at t is claimable by t + window + one payout period, however often the
    // provider is paid since.
    function test_attack02_frequentPayoutsDoNotDelayOlderOnes() public {
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, TOKEN);
        _settle(JOB, provider, 10 * TOKEN);
        uint256 due = block.timestamp + WINDOW + PAYOUT_PERIOD;
        for (uint256 i; i < 6; ++i) {
            _skip(WINDOW / 2);
            bytes32 tiny = keccak256(abi.encode("tiny", i));
            _job(tiny, 1);
            _lock(tiny, provider, 1);
            _settle(tiny, provider, 1);
            if (block.timestamp >= due) {
                assertLe(10 * TOKEN, _claimable(provider), "old payout pushed back by 1-wei payouts");
            }
        }
    }

    // 3a. A customer's dispute names a payee of that job: a small job cannot freeze an unrelated
    // provider's pending pay.
    function test_attack03_smallJobCannotFreezeAnUnrelatedProvider() public {
        _stake(provider, 1_000 * TOKEN);
        _stake(provider2, 1_000 * TOKEN);
        bytes32 big = keccak256("big");
        _job(big, 100 * TOKEN);
        _lock(big, provider2, TOKEN);
        _settle(big, provider2, 100 * TOKEN);
        _job(JOB, 1 * TOKEN);
        _lock(JOB, provider, TOKEN);
        _settle(JOB, provider, 1 * TOKEN);
        _fund(customer, 100 * uint256(BOND));

        for (uint256 i; i < 100; ++i) {
            vm.prank(customer);
            try disputes.disputeSettlement(JOB, provider2, 1 * TOKEN, ROOT) {} catch {}
        }

        assertEq(escrow.balanceOf(provider2).pending, 100 * TOKEN, "unrelated provider's pay frozen");
    }

    // 3b. All disputes about one job together freeze at most what the job paid its providers.
    function test_attack03_disputesOfOneJobFreezeAtMostItsPayout() public {
        _stake(provider, 1_000 * TOKEN);
        bytes32 other = keccak256("other");
        _job(other, 100 * TOKEN);
        _lock(other, provider, TOKEN);
        _settle(other, provider, 100 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, TOKEN);
        _settle(JOB, provider, 4 * TOKEN); // refund 6
        _fund(customer, 10 * uint256(BOND));

        for (uint256 i; i < 5; ++i) {
            vm.prank(customer);
            try disputes.disputeSettlement(JOB, provider, 4 * TOKEN, ROOT) {} catch {}
        }

        assertLe(escrow.balanceOf(provider).frozen, 4 * TOKEN, "froze more than the job paid");
    }

    // 3c. Spam costs the spammer: a dispute that is never ruled on loses the opener its bond.
    function test_attack03_anUnruledDisputeCostsTheOpenerItsBond() public {
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, TOKEN);
        _settle(JOB, provider, 10 * TOKEN);
        _fund(customer, BOND);
        uint256 before = token.balanceOf(customer);
        vm.prank(customer);
        uint256 disputeId = disputes.disputeSettlement(JOB, provider, 10 * TOKEN, ROOT);
        _skip(RULING + 1);

        disputes.applyDefaultRuling(disputeId);

        assertEq(token.balanceOf(customer), before - BOND, "a never-ruled freeze was free");
    }

    // 4. Only a provider of the job may dispute its refund.
    function test_attack04_strangerCannotFreezeARefund() public {
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, TOKEN);
        _settle(JOB, provider, 4 * TOKEN); // refund 6
        _fund(stranger, BOND);

        vm.prank(stranger);
        try disputes.disputeSettlement(JOB, customer, 6 * TOKEN, ROOT) {} catch {}

        assertEq(escrow.jobOf(JOB).refund, 6 * TOKEN, "a stranger froze the refund");
    }

    // 5. Collateral of a job that left its provider off the settlement stays slashable (and
    // locked) for the slash window after the job closed.
    function test_attack05_unlistedCollateralStaysSlashableAfterSettlement() public {
        _stake(provider, 1_000 * TOKEN);
        _stake(provider2, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, 50 * TOKEN);
        _lock(JOB, provider2, 50 * TOKEN); // provider2 abandons
        _settle(JOB, provider, 10 * TOKEN);

        vm.prank(provider2);
        try escrow.releaseCollateral(JOB, _one(provider2)) {} catch {}
        vm.prank(orchestrator);
        try sm.slashCollateral(JOB, provider2, 0, 50 * TOKEN, IStakeManager.SlashReason.Abandonment, ROOT) {} catch {}

        assertEq(sm.slashCount(), 1, "the abandonment slash was raced out");
    }

    function test_attack05_collateralStaysSlashableAfterReclaim() public {
        _stake(provider2, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider2, 50 * TOKEN);
        _skip(1 hours + GRACE + 1);
        vm.prank(customer);
        escrow.reclaim(JOB);

        vm.prank(provider2);
        try escrow.releaseCollateral(JOB, _one(provider2)) {} catch {}
        vm.prank(orchestrator);
        try sm.slashCollateral(JOB, provider2, 0, 50 * TOKEN, IStakeManager.SlashReason.Abandonment, ROOT) {} catch {}

        assertEq(sm.slashCount(), 1, "the abandonment slash was raced out");
    }

    // 6. A provider's collateral has a way out when nobody settles or reclaims the job.
    function test_attack06_collateralOfAForgottenJobCanBeReleased() public {
        _stake(provider, 100 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, 100 * TOKEN);
        _skip(1 hours + GRACE + 30 days);

        vm.prank(provider);
        try escrow.releaseCollateral(JOB, _one(provider)) {} catch {}

        assertEq(sm.lockedFor(JOB, provider), 0, "collateral locked forever");
    }

    // 7a. Score proofs expire.
    function test_attack07_staleScoreProofSlashesNothing() public {
        _stake(provider, 100 * TOKEN);
        _commitEpoch(1, provider, 1_000);
        _skip(30 days);

        _findAndSlash(finder, provider, 1, 1_000, ROOT);

        assertEq(sm.stakeOf(provider).bonded, 100 * TOKEN, "a month-old proof slashed");
    }

    // 7b. A score slash is sized on the stake the commitment covered, not stake added since.
    function test_attack07_scoreSlashIgnoresStakeAddedAfterTheCommit() public {
        _stake(provider, 100 * TOKEN);
        _commitEpoch(1, provider, 1_000);
        _skip(1 hours);
        _stake(provider, 900 * TOKEN);

        _findAndSlash(finder, provider, 1, 1_000, ROOT);

        assertLe(1_000 * TOKEN - sm.stakeOf(provider).bonded, 10 * TOKEN, "slashed stake added after the commit");
    }

    // 8a. A provider is never the finder of its own score slash.
    function test_attack08_providerCannotFindItself() public {
        _stake(provider, 100 * TOKEN);
        _commitEpoch(1, provider, 1_000);

        _findAndSlash(provider, provider, 1, 1_000, ROOT);

        if (sm.slashCount() != 0) {
            assertTrue(sm.slashOf(1).finder != provider, "the provider took back the finder's share");
        }
    }

    // 8b. A copied reveal earns a front-runner nothing.
    function test_attack08_copiedRevealEarnsNothing() public {
        _stake(provider, 100 * TOKEN);
        _commitEpoch(1, provider, 1_000);
        bytes32 salt = keccak256(abi.encode(finder, uint64(1)));
        vm.prank(finder);
        try sm.commitFinding(keccak256(abi.encode(finder, provider, uint64(1), salt))) {} catch {}
        _skip(12);

        _reveal(stranger, provider, 1, 1_000, ROOT, salt); // the front-runner's copy lands first

        if (sm.slashCount() != 0) {
            assertTrue(sm.slashOf(1).finder != stranger, "a front-runner took the finder's share");
        }
    }

    // 9. An arbiter's slash is bounded by what the dispute is about.
    function test_attack09_arbiterSlashIsBoundedByTheDisputedPayout() public {
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 1 * TOKEN);
        _lock(JOB, provider, TOKEN);
        _settle(JOB, provider, 1 * TOKEN);
        _fund(customer, BOND);
        vm.prank(customer);
        uint256 disputeId = disputes.disputeSettlement(JOB, provider, 1 * TOKEN, ROOT);

        vm.prank(arbiter);
        try disputes.rule(disputeId, true, 1_000 * TOKEN, ROOT) {} catch {}

        assertLe(1_000 * TOKEN - sm.stakeOf(provider).bonded, 1 * TOKEN, "a 1-token dispute slashed the stake");
    }

    // 10. A dismissed dispute returns the payout to the rest of its dispute window.
    function test_attack10_dismissalDoesNotSkipTheWindow() public {
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, TOKEN);
        _settle(JOB, provider, 10 * TOKEN);
        uint256 settledAt = block.timestamp;
        _fund(customer, BOND);
        vm.prank(customer);
        uint256 disputeId = disputes.disputeSettlement(JOB, provider, 10 * TOKEN, ROOT);

        vm.prank(arbiter);
        disputes.rule(disputeId, false, 0, ROOT);

        assertTrue(block.timestamp < settledAt + WINDOW, "still inside the window");
        assertEq(_claimable(provider), 0, "dismissal made the payout claimable inside the window");
    }

    // 11. Settlement and reclaim never both succeed at the same moment: settlement closes at
    // deadline + grace, where reclaim opens.
    function test_attack11_settleAndReclaimNeverRace() public {
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, TOKEN);
        uint256 reclaimableAfter = escrow.jobOf(JOB).deadline + GRACE;
        for (uint256 t = reclaimableAfter - 1; t <= reclaimableAfter + 1; ++t) {
            vm.warp(t);
            uint256 snap = vm.snapshotState();
            vm.prank(customer);
            bool reclaimed;
            try escrow.reclaim(JOB) {
                reclaimed = true;
            } catch {}
            vm.revertToState(snap);
            bool settled;
            address[] memory ps = _one(provider);
            uint256[] memory pay = new uint256[](1);
            pay[0] = 10 * TOKEN;
            vm.prank(orchestrator);
            try escrow.settle(JOB, ps, pay, ROOT) {
                settled = true;
            } catch {}
            vm.revertToState(snap);
            assertTrue(!(reclaimed && settled), "settle and reclaim both possible");
            assertTrue(reclaimed || settled, "neither settle nor reclaim possible");
        }
    }

    // 12. Time parameters cannot wrap: a huge dispute window never makes payouts claimable at
    // once, a huge ruling period never applies the default at once.
    function test_attack12_hugeDisputeWindowDoesNotWrap() public {
        vm.prank(admin);
        try escrow.setDisputeWindow(uint64(2 ** 40)) {} catch {}
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, TOKEN);
        _settle(JOB, provider, 10 * TOKEN);

        assertEq(_claimable(provider), 0, "payout claimable at once");
    }

    function test_attack12_hugeRulingPeriodDoesNotWrap() public {
        vm.prank(admin);
        try disputes.setRulingPeriod(uint64(2 ** 40)) {} catch {}
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, TOKEN);
        _settle(JOB, provider, 10 * TOKEN);
        _fund(customer, BOND);
        vm.prank(customer);
        uint256 disputeId = disputes.disputeSettlement(JOB, provider, 10 * TOKEN, ROOT);
        _skip(1);

        bool defaulted;
        try disputes.applyDefaultRuling(disputeId) {
            defaulted = true;
        } catch {}

        assertTrue(!defaulted, "the default applied at once");
    }

    // 13. Smaller points.
    function test_attack13_escrowRefusesAZeroStakeManager() public {
        bool deployed;
        try new JobEscrow(IERC20(address(token)), IStakeManager(address(0)), admin, GRACE, WINDOW) {
            deployed = true;
        } catch {}
        assertTrue(!deployed, "deployed without a StakeManager");
    }

    function test_attack13_escrowRefusesAnotherToken() public {
        TestToken other = new TestToken();
        bool deployed;
        try new JobEscrow(IERC20(address(other)), sm, admin, GRACE, WINDOW) {
            deployed = true;
        } catch {}
        assertTrue(!deployed, "deployed with a token the StakeManager does not use");
    }

    function test_attack13_reversedScoreSlashRestoresTheTier() public {
        _stake(provider, 100 * TOKEN);
        vm.prank(orchestrator);
        sm.setTier(provider, IStakeManager.Tier.High);
        _commitEpoch(1, provider, 1_000);
        _findAndSlash(finder, provider, 1, 1_000, ROOT);
        _fund(provider, BOND);
        vm.prank(provider);
        uint256 disputeId = disputes.disputeSlash(1, ROOT);

        vm.prank(arbiter);
        disputes.rule(disputeId, true, 0, ROOT);

        assertTrue(sm.stakeOf(provider).tier == IStakeManager.Tier.High, "reversal left the provider demoted");
    }

    function test_attack13_assemblyRefusesADirtyAddressWithAReason() public {
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, TOKEN);
        IJobEscrow.SoloSettlement[] memory pairs = new IJobEscrow.SoloSettlement[](1);
        pairs[0] = IJobEscrow.SoloSettlement(JOB, provider, 10 * TOKEN, ROOT);
        bytes memory data = abi.encodeCall(sm.settleCollateral, (pairs, block.timestamp + 1 days));
        data[4 + 32 * 4 + 11] = 0x01; // a dirty bit above the provider's 20 bytes

        vm.prank(address(escrow));
        (bool ok, bytes memory reason) = address(sm).call(data);

        assertTrue(!ok, "a dirty address settled");
        assertTrue(reason.length >= 4, "empty revert data");
        assertTrue(bytes4(reason) == bytes4(keccak256("StakeManagerInvalidAddress(uint256)")), "another revert");
        assertEq(sm.lockedFor(JOB, provider), TOKEN, "collateral changed");
    }
}
