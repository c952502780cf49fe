// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IStakeManager} from "../../contracts/interfaces/IStakeManager.sol";
import {IJobEscrow} from "../../contracts/interfaces/IJobEscrow.sol";
import {TestToken} from "../../contracts/test/TestToken.sol";
import {Compat} from "./Compat.sol";

/// @notice The second review's attacks (issue 32), one test each, written as the rule the attack
/// breaks. Each was run against the reviewed contracts first, where it failed (the attack worked);
/// the calls whose signature the fixes changed sit in the helpers at the end.
contract AttacksIssue32Test is Compat {
    bytes32 internal constant JOB = keccak256("job");
    bytes32 internal constant OTHER = keccak256("other job");
    address internal customer2 = address(0xC2);
    address internal bot = address(0xB07);

    function setUp() public {
        _deploy(new TestToken());
    }

    // 1a. Each placement's collateral is slashable on its own: proving a provider's 1-token
    // placement first does not shrink the slash of its abandoned 100-token placement.
    function test_issue32_01_cheapProofDoesNotShieldTheBigPlacement() public {
        _stake(provider, 1_000 * TOKEN);
        _reserve(provider, 200 * TOKEN);
        _job(JOB, 10 * TOKEN);
        bytes32 small = _assignLeaf(JOB, provider, 1, TOKEN);
        bytes32 big = _assignLeaf(JOB, provider, 2, 100 * TOKEN);
        _commitRoot(_pair(small, big));
        _proveAs(stranger, JOB, provider, 1, TOKEN, _one32(big)); // the provider's friend, at once
        _proveAs(orchestrator, JOB, provider, 2, 100 * TOKEN, _one32(small));

        uint256 before = sm.stakeOf(provider).bonded;
        _slashPlacement(JOB, provider, 2, 100 * TOKEN);

        assertEq(before - sm.stakeOf(provider).bonded, 100 * TOKEN, "slashed of the 100-token placement");
    }

    // 1b. Two abandoned 50-token placements of one job are slashable for 50 each.
    function test_issue32_01_twoEqualPlacementsAreSlashableTwice() public {
        _stake(provider, 1_000 * TOKEN);
        _reserve(provider, 200 * TOKEN);
        _job(JOB, 10 * TOKEN);
        bytes32 first = _assignLeaf(JOB, provider, 1, 50 * TOKEN);
        bytes32 second = _assignLeaf(JOB, provider, 2, 50 * TOKEN);
        _commitRoot(first == second ? first : _pair(first, second));
        _proveAs(orchestrator, JOB, provider, 1, 50 * TOKEN, first == second ? new bytes32[](0) : _one32(second));
        _proveAs(orchestrator, JOB, provider, 2, 50 * TOKEN, first == second ? new bytes32[](0) : _one32(first));

        uint256 before = sm.stakeOf(provider).bonded;
        _slashPlacement(JOB, provider, 1, 50 * TOKEN);
        _slashPlacement(JOB, provider, 2, 50 * TOKEN);

        assertEq(before - sm.stakeOf(provider).bonded, 100 * TOKEN, "slashed of two 50-token placements");
    }

    // 2. A score slash counts no stake added after the epoch's commit, also when a collateral
    // slash lowered the stake before it.
    function test_issue32_02_scoreSlashIgnoresATopUpAfterACollateralSlash() public {
        _stake(provider, 100 * TOKEN);
        _reserve(provider, 50 * TOKEN);
        _job(JOB, 10 * TOKEN);
        bytes32 leaf = _assignLeaf(JOB, provider, 1, 50 * TOKEN);
        _commitRoot(leaf);
        _proveAs(orchestrator, JOB, provider, 1, 50 * TOKEN, new bytes32[](0));
        _slashPlacement(JOB, provider, 1, 50 * TOKEN); // 100 -> 50
        _skip(1 hours);
        _commitScore(1, provider, 1_000);
        _skip(1 hours);
        _stake(provider, 50 * TOKEN); // topped up after the commit

        uint256 before = sm.stakeOf(provider).bonded;
        _findAndSlash(finder, provider, 1, 1_000, ROOT);

        assertEq(before - sm.stakeOf(provider).bonded, 5 * TOKEN, "score slash (10% of the 50 at the commit)");
    }

    // 2, decided: a score slash is sized on min(stake at the commit, stake now), never the least
    // stake since the commit. Stake that left and came back pays at most the liability it carried
    // at the commit (10 % of 100 here), never more; a walk over every checkpoint since the commit
    // would cost the finder gas the provider itself could grow (one checkpoint per block), an
    // escape. What no rule lets it do: pay less than its stake at the commit while holding it.
    function test_issue32_02_scoreSlashIsTheLiabilityAtTheCommitNeverMore() public {
        _stake(provider, 100 * TOKEN);
        vm.prank(provider);
        uint256 lockId = sm.requestUnbond(90 * TOKEN);
        _skip(UNBONDING_PERIOD);
        _commitScore(1, provider, 1_000); // holds 100 (10 bonded, 90 unbonding)
        _skip(1 hours);
        vm.prank(provider);
        sm.withdraw(lockId); // 10 left ...
        _stake(provider, 90 * TOKEN); // ... and 90 back

        uint256 before = sm.stakeOf(provider).bonded;
        _findAndSlash(finder, provider, 1, 1_000, ROOT);

        assertEq(before - sm.stakeOf(provider).bonded, 10 * TOKEN, "score slash (10% of the 100 at the commit)");
    }

    // 3. A customer whose job paid the provider nothing cannot freeze the provider's payout from
    // another customer's job (whose own window has closed).
    function test_issue32_03_disputeFreezesOnlyWhatTheJobPaidThePayee() public {
        _stake(provider, 1_000 * TOKEN);
        _stake(provider2, 1_000 * TOKEN);
        _reserve(provider, 100 * TOKEN);
        _jobFor(customer2, OTHER, 100 * TOKEN);
        _settle(OTHER, provider, 100 * TOKEN); // the other customer's job pays the provider 100
        _skip(WINDOW + 1 hours); // its window closed; the payout is still pending
        _job(JOB, 50 * TOKEN);
        bytes32 leaf = _assignLeaf(JOB, provider, 1, TOKEN);
        _commitRoot(leaf);
        _proveAs(stranger, JOB, provider, 1, TOKEN, new bytes32[](0)); // the provider was assigned
        _settle(JOB, provider2, 50 * TOKEN); // ... but JOB paid provider2, not it
        uint256 pending = escrow.balanceOf(provider).pending;

        _provePaid(JOB, provider, 50 * TOKEN); // refused: JOB paid it nothing
        _fund(customer, BOND);
        _disputePayee(customer, JOB, provider, 50 * TOKEN);

        assertEq(escrow.balanceOf(provider).pending, pending, "the other job's payout frozen");
    }

    // 4. A dismissed dispute returns the payout at the release time settlement had set.
    function test_issue32_04_dismissalReturnsThePayoutOnTime() public {
        vm.prank(admin);
        escrow.setDisputeWindow(1 hours);
        vm.warp((block.timestamp / 1 days + 1) * 1 days + 1 hours); // 01:00
        _stake(provider, 1_000 * TOKEN);
        _reserve(provider, 100 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _assignAndProve(JOB, provider, 1, TOKEN);
        _settle(JOB, provider, 10 * TOKEN);
        uint256 releaseAt = escrow.balanceOf(provider).releaseAt; // the next midnight
        _fund(customer, BOND);
        uint256 disputeId = _disputePayee(customer, JOB, provider, 10 * TOKEN);
        vm.prank(arbiter);
        disputes.rule(disputeId, false, 0, ROOT);

        vm.warp(releaseAt);

        assertEq(_claimable(provider), 10 * TOKEN, "claimable at the release time settlement set");
    }

    // 5. Collateral stays slashable until its job's close + S, paid or not, whatever backs it: a
    // job lock as a reservation's placement.
    function test_issue32_05_paidLockStaysSlashableUntilTheWindowCloses() public {
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, 10 * TOKEN);
        _settle(JOB, provider, 10 * TOKEN);
        _skip(1 hours);

        uint256 before = sm.stakeOf(provider).bonded;
        _slashPlacement(JOB, provider, 0, 10 * TOKEN);

        assertEq(before - sm.stakeOf(provider).bonded, 10 * TOKEN, "slashed of a paid job lock inside S");
    }

    // 6. A bot that pre-commits for every (provider, epoch) cannot take the finder's share with a
    // copied reveal.
    function test_issue32_06_preCommittedBotCannotUseACopiedReveal() public {
        _stake(provider, 100 * TOKEN);
        _commitScore(1, provider, 1_000);
        bytes32 botSalt = keccak256("bot");
        vm.prank(bot);
        sm.commitFinding(keccak256(abi.encode(bot, provider, uint64(1), botSalt))); // all it can know
        _skip(12);

        _reveal(bot, provider, 1, 1_000, ROOT, botSalt); // the finder's (score, digest, proof), copied

        if (sm.slashCount() != 0) {
            assertTrue(sm.slashOf(1).finder != bot, "a pre-committed bot took the finder's share");
        }
    }

    // 7a. Raising the dispute window does not reopen a settled job's window.
    function test_issue32_07_raisingWDoesNotReopenAWindow() public {
        vm.prank(admin);
        escrow.setDisputeWindow(1 hours);
        _skip(1); // in effect from the next second
        _stake(provider, 1_000 * TOKEN);
        _reserve(provider, 100 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _assignAndProve(JOB, provider, 1, TOKEN);
        _settle(JOB, provider, 10 * TOKEN);
        _skip(2 hours);
        vm.prank(admin);
        escrow.setDisputeWindow(1 days);
        uint256 pending = escrow.balanceOf(provider).pending;

        _fund(customer, BOND);
        _disputePayee(customer, JOB, provider, 10 * TOKEN);

        assertEq(escrow.balanceOf(provider).pending, pending, "a closed window reopened");
    }

    // 7b. Lowering the collateral slash window does not cut a made job's protection.
    function test_issue32_07_loweringSDoesNotCutProtection() public {
        _stake(provider, 1_000 * TOKEN);
        _reserve(provider, 100 * TOKEN);
        _job(JOB, 10 * TOKEN);
        bytes32 leaf = _assignLeaf(JOB, provider, 1, 10 * TOKEN);
        _commitRoot(leaf);
        _proveAs(orchestrator, JOB, provider, 1, 10 * TOKEN, new bytes32[](0));
        _settle(JOB, provider, 10 * TOKEN);
        vm.prank(admin);
        escrow.setCollateralSlashWindow(1 hours);
        _skip(2 hours);

        uint256 before = sm.stakeOf(provider).bonded;
        _slashPlacement(JOB, provider, 1, 10 * TOKEN);

        assertEq(before - sm.stakeOf(provider).bonded, 10 * TOKEN, "slashed inside the job's own S");
    }

    // Design point: a granted customer dispute asking a slash larger than what is reachable
    // slashes what is, instead of reverting the ruling.
    function test_issue32_grantedSlashIsCappedAtWhatIsReachable() public {
        _stake(provider, 100 * TOKEN);
        _job(JOB, 50 * TOKEN);
        _lock(JOB, provider, 100 * TOKEN); // nothing is free to slash
        _settle(JOB, provider, 50 * TOKEN);
        _fund(customer, BOND);
        uint256 disputeId = _disputePayee(customer, JOB, provider, 50 * TOKEN);

        vm.prank(arbiter);
        try disputes.rule(disputeId, true, 50 * TOKEN, ROOT) {} catch {}

        assertEq(_claimable(customer), 50 * TOKEN, "the granted dispute paid the customer");
        assertEq(sm.stakeOf(provider).bonded, 100 * TOKEN, "locked stake taken by the capped slash");
    }

    // Design point: what the orchestrator role alone can pin is bounded by what the provider
    // allowed; the way down stops raises and extensions but never shortens a live reservation.
    function test_issue32_orchestratorPinsAtMostWhatTheProviderAllowed() public {
        _stake(provider, 1_000 * TOKEN);
        vm.prank(provider);
        sm.setReservationTerms(100 * TOKEN, 7 days);
        uint256[] memory amounts = new uint256[](1);
        amounts[0] = 1_000 * TOKEN; // all of its stake ...
        vm.prank(orchestrator);
        try sm.reserveCollateral(_one(provider), amounts, uint64(block.timestamp + 365 days)) {} catch {}
        (uint256 pinned,) = sm.reservationOf(provider);
        assertLe(pinned, 100 * TOKEN, "pinned beyond the provider's ceiling");
        amounts[0] = 100 * TOKEN; // ... or a year
        vm.prank(orchestrator);
        try sm.reserveCollateral(_one(provider), amounts, uint64(block.timestamp + 365 days)) {} catch {}
        (, uint256 until) = sm.reservationOf(provider);
        assertLe(until, block.timestamp + 7 days, "pinned beyond the provider's horizon");

        _reserve7Days(provider, 100 * TOKEN);
        vm.prank(provider);
        sm.setReservationTerms(0, 0); // the way down
        (pinned, until) = sm.reservationOf(provider);
        assertEq(pinned, 100 * TOKEN, "a live reservation shrank");
        _skip(1 days);
        _reserve7Days(provider, 100 * TOKEN); // no extension under the new terms
        (, uint256 after_) = sm.reservationOf(provider);
        assertEq(after_, until, "extended past what the provider allows");
    }

    // Design point: a placement is backed only by the reservation that was live when its root
    // was committed; a reservation made after that one lapsed does not pay for old leaves.
    function test_issue32_newReservationDoesNotBackOldLeaves() public {
        _stake(provider, 1_000 * TOKEN);
        _reserve7Days(provider, 100 * TOKEN);
        _jobFor(customer, JOB, 10 * TOKEN, 30 days);
        _assignAndProve(JOB, provider, 1, 100 * TOKEN);
        _skip(8 days); // the reservation lapsed; the job's slash window is still open
        _reserve7Days(provider, 100 * TOKEN); // a new reservation, for new work

        uint256 before = sm.stakeOf(provider).bonded;
        _slashPlacement(JOB, provider, 1, 100 * TOKEN);
        assertEq(before - sm.stakeOf(provider).bonded, 0, "a later reservation paid for an old leaf");

        // A leaf committed under the new reservation is backed by it, and so is the old leaf
        // once the orchestrator commits it again under the new one.
        _commitRoot(_pair(_assignLeaf(JOB, provider, 1, 100 * TOKEN), ROOT));
        _proveAs(stranger, JOB, provider, 1, 100 * TOKEN, _one32(ROOT));
        _slashPlacement(JOB, provider, 1, 100 * TOKEN);
        assertEq(before - sm.stakeOf(provider).bonded, 100 * TOKEN, "re-committed under the live reservation");
    }

    // Design point: backer status (a party to the job's disputes) needs something the provider
    // did: the job paid it (its settlement listed it). A leaf or a lock the orchestrator alone
    // put on chain does not make a provider a party to another customer's disputes.
    function test_issue32_backerStatusNeedsTheProvidersOwnPart() public {
        _stake(provider, 1_000 * TOKEN);
        _reserve(provider, 200 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _assignAndProve(JOB, provider, 1, 5 * TOKEN); // named by the orchestrator alone
        _lock(JOB, provider, 5 * TOKEN);
        assertTrue(!escrow.isBacker(JOB, provider), "an assignment or a lock alone made a backer");
        _settle(JOB, provider2, 10 * TOKEN); // the job paid someone else
        assertTrue(!escrow.isBacker(JOB, provider), "a provider the job never listed is a backer");
        _fund(provider, BOND);
        vm.prank(provider);
        try disputes.disputeSettlement(JOB, customer, TOKEN, ROOT) {
            assertTrue(false, "a provider the job never listed disputed its refund");
        } catch {}
        assertTrue(escrow.isBacker(JOB, provider2), "the provider the job paid is a party");
    }

    // ------------------------------------------------------------------ helpers

    function _reserve7Days(address who, uint256 amount) internal {
        uint256[] memory amounts = new uint256[](1);
        amounts[0] = amount;
        vm.prank(orchestrator);
        try sm.reserveCollateral(_one(who), amounts, uint64(block.timestamp + 7 days)) {} catch {}
    }

    function _reserve(address who, uint256 amount) internal {
        uint256[] memory amounts = new uint256[](1);
        amounts[0] = amount;
        vm.prank(orchestrator);
        sm.reserveCollateral(_one(who), amounts, uint64(block.timestamp + 30 days));
    }

    function _jobFor(address who, bytes32 jobId, uint256 amount) internal {
        _jobFor(who, jobId, amount, 1 hours);
    }

    function _jobFor(address who, bytes32 jobId, uint256 amount, uint256 runs) internal {
        _fund(who, amount);
        vm.prank(who);
        escrow.createJob(jobId, amount, uint64(block.timestamp + runs), ROOT);
    }

    function _assignAndProve(bytes32 jobId, address who, uint256 placement, uint256 collateral) internal {
        _commitRoot(_assignLeaf(jobId, who, placement, collateral));
        _proveAs(orchestrator, jobId, who, placement, collateral, new bytes32[](0));
    }

    function _commitRoot(bytes32 root) internal {
        vm.prank(orchestrator);
        escrow.commitAssignments(root);
    }

    function _commitScore(uint64 epoch, address who, uint256 scoreBps) internal {
        vm.prank(orchestrator);
        sm.commitEpoch(epoch, keccak256(bytes.concat(keccak256(abi.encode(who, scoreBps, ROOT)))));
    }

    function _pair(bytes32 a, bytes32 b) internal pure returns (bytes32) {
        return a < b ? keccak256(abi.encode(a, b)) : keccak256(abi.encode(b, a));
    }

    function _one32(bytes32 node) internal pure returns (bytes32[] memory proof) {
        proof = new bytes32[](1);
        proof[0] = node;
    }

    /// @dev The customer opens a dispute of `respondent`'s payout from `jobId`; returns its id,
    /// or 0 when it was refused.
    function _disputePayee(address who, bytes32 jobId, address respondent, uint256 amount)
        internal
        returns (uint256 disputeId)
    {
        vm.prank(who);
        try disputes.disputeSettlement(jobId, respondent, amount, ROOT) returns (uint256 id) {
            disputeId = id;
        } catch {}
    }

    // The calls the fixes changed (the reviewed contracts had no placement id and no payout proof;
    // there a customer's dispute needed no `provePayout`, which `_settle` sends).

    function _assignLeaf(bytes32 jobId, address who, uint256 placement, uint256 collateral)
        internal
        pure
        returns (bytes32)
    {
        return keccak256(bytes.concat(keccak256(abi.encode(jobId, who, placement, collateral))));
    }

    function _proveAs(
        address sender,
        bytes32 jobId,
        address who,
        uint256 placement,
        uint256 collateral,
        bytes32[] memory proof
    ) internal {
        vm.prank(sender);
        escrow.proveAssignment(jobId, who, placement, collateral, proof);
    }

    function _slashPlacement(bytes32 jobId, address who, uint256 placement, uint256 amount) internal {
        vm.prank(orchestrator);
        try sm.slashCollateral(jobId, who, placement, amount, IStakeManager.SlashReason.Abandonment, ROOT) {} catch {}
    }
}
