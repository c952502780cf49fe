// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {IJobEscrow} from "./IJobEscrow.sol";

/// @title IStakeManager
/// @notice Provider stake for DePIN Mesh: bonding, unbonding locks, per-job collateral locks,
/// tiers, epoch score commitments and disputable slashing.
/// @dev Accounting per provider: `bonded` backs work and includes `locked` (collateral held for
/// unsettled jobs); `unbonding` is stake on its way out, still slashable until withdrawn. Slash
/// proceeds are not paid at once: each slash is a record that stays `Pending` for the slash dispute
/// window, during which the provider may dispute it (see IDisputes) and an arbiter may reverse it.
/// The StakeManager also keeps the books of the JobEscrow's payouts (the tokens stay in the
/// escrow): a provider's pending payout shares one storage slot with its locked collateral, so a
/// settlement that releases a provider's collateral and pays it touches one slot per provider.
interface IStakeManager {
    /// @notice Provider tier; same numbering as `orchestrator.domain.types.Tier`.
    enum Tier {
        Background, // demoted or unproven: low-priority work only
        Standard, // a staked node in good standing
        High // fresh PoPW handshake and sustained reliability
    }

    /// @notice Why a provider was slashed.
    enum SlashReason {
        LowScore, // committed epoch score under the threshold (slashForScore)
        Abandonment, // left a task it held collateral for
        FailedVerification, // output failed spot-check or redundancy verification
        Other // anything else, e.g. an arbiter's ruling on a settlement dispute
    }

    /// @notice Life of a slash record.
    enum SlashStatus {
        None, // no such slash
        Pending, // proceeds held; releasable once `releasableAt` has passed
        Frozen, // disputed: held until the arbiter rules
        Released, // proceeds paid to beneficiary and finder
        Reversed // returned to the provider's bonded stake by an arbiter
    }

    /// @notice What a client needs to know of one provider's stake.
    struct StakeInfo {
        uint256 bonded; // stake that backs work, including `locked`
        uint256 locked; // part of `bonded` locked: job locks plus the live reservation
        uint256 unbonding; // requested for withdrawal, still slashable until withdrawn
        Tier tier; // current tier
    }

    /// @notice An account's payout books, kept for the JobEscrow (which holds the tokens).
    struct Payout {
        uint256 claimable; // the escrow pays this on `claim`
        uint256 pending; // credited by settlement, not yet claimable
        uint256 releaseAt; // unix time all of `pending` is claimable (an older part may mature sooner)
    }

    /// @notice One request to unbond (Livepeer's UnbondingLock).
    struct UnbondingLock {
        uint128 amount; // stake still in this lock (slashing lowers it); `withdraw` pays exactly this
        uint64 withdrawableAt; // unix time from which `withdraw` pays it out
    }

    /// @notice One slash, held as pending proceeds until its dispute window has passed.
    struct Slash {
        address provider; // who was slashed
        uint40 releasableAt; // end of the dispute window: proceeds can be released from then on
        SlashStatus status; // see SlashStatus
        SlashReason reason; // why
        Tier priorTier; // the provider's tier before the slash (a reversed score slash restores it)
        address beneficiary; // the injured customer, or the treasury
        uint96 amount; // beneficiary's share of the slashed stake
        address finder; // who proved the fault (slashForScore caller), or zero
        uint96 finderAmount; // finder's share of the slashed stake
        bytes32 evidence; // hash of the evidence (telemetry digest, verification report ...)
    }

    // ------------------------------------------------------------------ errors

    /// @notice An amount of zero was given where stake of `account` must move.
    error StakeManagerZeroAmount(address account);
    /// @notice `provider` asked for `requested` but only `free` is neither locked nor unbonding.
    error StakeManagerInsufficientFreeStake(address provider, uint256 requested, uint256 free);
    /// @notice `provider` has no open unbonding lock `lockId`.
    error StakeManagerUnknownUnbondingLock(address provider, uint256 lockId);
    /// @notice Unbonding lock `lockId` cannot be withdrawn before `withdrawableAt`.
    error StakeManagerUnbondingNotEnded(uint256 lockId, uint256 withdrawableAt);
    /// @notice Arrays that must pair up have lengths `a` and `b`.
    error StakeManagerLengthMismatch(uint256 a, uint256 b);
    /// @notice The token delivered `received` for a transfer of `expected` (fee-on-transfer token).
    error StakeManagerFeeOnTransferToken(uint256 expected, uint256 received);
    /// @notice Epoch `epoch` already has a committed score root.
    error StakeManagerEpochAlreadyCommitted(uint64 epoch);
    /// @notice Epoch `epoch` has no committed score root.
    error StakeManagerEpochNotCommitted(uint64 epoch);
    /// @notice A zero score root was given for `epoch`.
    error StakeManagerZeroRoot(uint64 epoch);
    /// @notice The proof does not place (provider, score, digest) under the epoch root.
    error StakeManagerInvalidScoreProof(address provider, uint64 epoch);
    /// @notice `scoreBps` is not under the slashing threshold `thresholdBps`.
    error StakeManagerScoreAboveThreshold(uint256 scoreBps, uint256 thresholdBps);
    /// @notice `provider` was already slashed for its score in `epoch`.
    error StakeManagerAlreadySlashedForEpoch(address provider, uint64 epoch);
    /// @notice `provider` has nothing slashable for this slash.
    error StakeManagerNothingToSlash(address provider);
    /// @notice No slash `slashId` exists or it is not in the status the call needs.
    error StakeManagerSlashNotInStatus(uint256 slashId, SlashStatus status);
    /// @notice Slash `slashId` is still in its dispute window, which ends at `releasableAt`.
    error StakeManagerSlashStillDisputable(uint256 slashId, uint256 releasableAt);
    /// @notice Slash `slashId`'s dispute window ended at `releasableAt`.
    error StakeManagerSlashWindowClosed(uint256 slashId, uint256 releasableAt);
    /// @notice A basis-point parameter `bps` exceeds 10_000.
    error StakeManagerInvalidBps(uint256 bps);
    /// @notice The zero address was given for `parameter`.
    error StakeManagerZeroAddress(string parameter);
    /// @notice The job escrow is already set to `escrow`.
    error StakeManagerEscrowAlreadySet(address escrow);
    /// @notice No job escrow is set, so the customer of job `jobId` cannot be found.
    error StakeManagerEscrowNotSet(bytes32 jobId);
    /// @notice `account` holds `available` pending payout, less than the `requested` to freeze.
    error StakeManagerInsufficientPending(address account, uint256 requested, uint256 available);
    /// @notice Only the JobEscrow set by `setJobEscrow` keeps payout books; `caller` is not it.
    error StakeManagerNotJobEscrow(address caller);
    /// @notice An amount does not fit its packed storage field (`amount` > `max`).
    error StakeManagerAmountTooLarge(uint256 amount, uint256 max);
    /// @notice A parameter was set to `value`, outside [`min`, `max`].
    error StakeManagerParameterOutOfRange(uint256 value, uint256 min, uint256 max);
    /// @notice `provider` already has `max` open unbonding locks; withdraw or cancel one first.
    error StakeManagerTooManyUnbondingLocks(address provider, uint256 max);
    /// @notice Collateral of job `jobId` could be slashed only before `closedAt` (its slash window).
    error StakeManagerCollateralSlashWindowClosed(bytes32 jobId, uint256 closedAt);
    /// @notice The proof of epoch `epoch` is too old: score proofs are accepted until `expiredAt`.
    error StakeManagerScoreProofExpired(uint64 epoch, uint256 expiredAt);
    /// @notice `provider` cannot be the finder of its own score slash.
    error StakeManagerSelfFinding(address provider);
    /// @notice No finding `commitment` was committed by the caller in an earlier block.
    error StakeManagerFindingNotCommitted(bytes32 commitment);
    /// @notice Finding `commitment` was already committed.
    error StakeManagerFindingAlreadyCommitted(bytes32 commitment);
    /// @notice A calldata word `word` that must be an address has dirty upper bits.
    error StakeManagerInvalidAddress(uint256 word);
    /// @notice The JobEscrow `escrow` does not use this StakeManager's token and this StakeManager.
    error StakeManagerEscrowMismatch(address escrow);

    // ------------------------------------------------------------------ events

    /// @notice `provider` bonded `amount` more stake.
    event Staked(address indexed provider, uint256 amount);
    /// @notice A slash took `amount` from `provider`'s unbonding lock `lockId`.
    event UnbondingLockSlashed(address indexed provider, uint256 indexed lockId, uint256 amount);
    /// @notice `amount` of collateral `provider` held for job `jobId` was released to its free stake.
    event CollateralReleased(bytes32 indexed jobId, address indexed provider, uint256 amount);
    /// @notice `amount` of `account`'s pending payout became claimable.
    event PayoutMatured(address indexed account, uint256 amount);
    /// @notice `amount` was credited to `account`, claimable from `releaseAt` (at once if past).
    event PayoutCredited(address indexed account, uint256 amount, uint256 releaseAt);
    /// @notice `finder` committed to a score finding (revealed by `slashForScore` in a later block).
    event FindingCommitted(address indexed finder, bytes32 commitment);
    /// @notice Score proofs are accepted for `window` seconds after their epoch's commit.
    event ScoreProofWindowSet(uint256 window);
    /// @notice `provider` moved `amount` into unbonding lock `lockId`, withdrawable at `withdrawableAt`.
    event UnbondRequested(address indexed provider, uint256 indexed lockId, uint256 amount, uint256 withdrawableAt);
    /// @notice `provider` cancelled lock `lockId`; `amount` went back to bonded.
    event UnbondCancelled(address indexed provider, uint256 indexed lockId, uint256 amount);
    /// @notice `provider` withdrew `amount` from lock `lockId`.
    event Withdrawn(address indexed provider, uint256 indexed lockId, uint256 amount);
    /// @notice `amount` of `provider`'s stake now backs job `jobId`.
    event CollateralLocked(bytes32 indexed jobId, address indexed provider, uint256 amount);
    /// @notice `provider`'s standing reservation is now `amount`, locked until `until` (the
    /// larger and the later of the live one and the request).
    event CollateralReserved(address indexed provider, uint256 amount, uint256 until);
    /// @notice `provider` bounded what the orchestrator may reserve of its stake: at most `ceiling`,
    /// lapsing at most `horizon` seconds after the reservation is made or extended.
    event ReservationTermsSet(address indexed provider, uint256 ceiling, uint256 horizon);
    /// @notice `provider`'s tier changed from `oldTier` to `newTier`.
    event TierChanged(address indexed provider, Tier oldTier, Tier newTier);
    /// @notice The score root of `epoch` was committed.
    event EpochCommitted(uint64 indexed epoch, bytes32 scoreRoot);
    /// @notice Slash `slashId` took `amount + finderAmount` from `provider`; proceeds are pending
    /// until `releasableAt`. `jobId` is zero for slashes not tied to a job; `placement` names
    /// what a collateral slash took from: 0 the job lock, any other that placement (out of the
    /// reservation).
    event Slashed(
        uint256 indexed slashId,
        address indexed provider,
        bytes32 indexed jobId,
        uint256 placement,
        SlashReason reason,
        bytes32 evidence,
        address beneficiary,
        uint256 amount,
        address finder,
        uint256 finderAmount,
        uint256 releasableAt
    );
    /// @notice Slash `slashId` was disputed and is frozen until ruled.
    event SlashFrozen(uint256 indexed slashId);
    /// @notice Slash `slashId` was upheld after a dispute: it can be released.
    event SlashUpheld(uint256 indexed slashId);
    /// @notice Slash `slashId` was reversed: `amount` went back to the provider's bonded stake.
    event SlashReversed(uint256 indexed slashId, address indexed provider, uint256 amount);
    /// @notice Slash `slashId`'s proceeds were paid out.
    event SlashReleased(uint256 indexed slashId, address beneficiary, uint256 amount, address finder, uint256 finderAmount);
    /// @notice The unbonding period is now `period` seconds.
    event UnbondingPeriodSet(uint256 period);
    /// @notice Slashes stay disputable for `window` seconds.
    event SlashDisputeWindowSet(uint256 window);
    /// @notice Score slashing: under `thresholdBps`, slash `slashBps` of stake, `finderBps` of it to the finder.
    event ScoreSlashingSet(uint256 thresholdBps, uint256 slashBps, uint256 finderBps);
    /// @notice Slash proceeds without an injured customer go to `treasury`.
    event TreasurySet(address treasury);
    /// @notice `escrow` is the JobEscrow whose jobs collateral is locked for.
    event JobEscrowSet(address escrow);

    // ------------------------------------------------------------------ provider

    /// @notice Bonds `amount` of the stake token, pulled from the caller.
    /// @dev Rejects fee-on-transfer tokens by checking the balance delta.
    /// @param amount Token units to bond.
    function stake(uint256 amount) external;

    /// @notice Moves `amount` of free bonded stake into a new unbonding lock.
    /// @dev Only free stake (bonded minus locked collateral) can unbond. The lock stays slashable:
    /// a slash of unbonding stake lowers the locks themselves, so a lock never pays more than what
    /// is left of it, and nothing leaves earlier than its own `withdrawableAt`. At most
    /// `MAX_UNBONDING_LOCKS` locks are open per provider (slashing walks them).
    /// @param amount Token units to unbond.
    /// @return lockId Id of the new lock, per provider, from 0.
    function requestUnbond(uint256 amount) external returns (uint256 lockId);

    /// @notice Pays out unbonding lock `lockId` once its unbonding period has ended.
    /// @dev Pays the lock's amount, which slashing may have lowered.
    /// @param lockId The caller's lock.
    function withdraw(uint256 lockId) external;

    /// @notice Returns unbonding lock `lockId` to the caller's bonded stake.
    /// @param lockId The caller's lock.
    function cancelUnbond(uint256 lockId) external;

    // ------------------------------------------------------------------ escrow role

    /// @notice Locks `amounts[i]` of `providers[i]`'s free stake as collateral for `jobId`.
    /// @dev ESCROW_ROLE only. All-or-nothing. A provider may appear in several calls for one job;
    /// amounts add up.
    /// @param jobId The job the collateral backs.
    /// @param providers Providers to lock for.
    /// @param amounts Token units per provider, non-zero.
    function lockCollateral(bytes32 jobId, address[] calldata providers, uint256[] calldata amounts) external;

    // ------------------------------------------------------------------ reservations

    /// @notice Raises the standing reservation of each `providers[i]` to at least `amounts[i]`,
    /// locked until at least `until`: reserved stake backs every job assigned to the provider
    /// (`IJobEscrow.commitAssignments`) and cannot be unbonded or withdrawn, only slashed for an
    /// assigned job, until it lapses, when it is free again without anyone's action.
    /// @dev ORCHESTRATOR_ROLE only. All-or-nothing. A live reservation is never lowered or
    /// shortened (it never drops under the jobs that rely on it): it becomes the larger amount
    /// and the later lapse of itself and the request, so requests commute and orchestrator
    /// replicas may send them in any order. A lapsed one is set to the request. Emits
    /// CollateralReserved with the resulting amount and lapse. `until` is in the future and at
    /// most MAX_PERIOD ahead. The orchestrator assigns a provider
    /// only jobs whose collateral its reservation covers until the job's collateral slash window
    /// closes (`IJobEscrow.collateralReleasableAt`).
    /// Where a provider set terms ({setReservationTerms}), the resulting reservation is at most its
    /// ceiling and lapses at most its horizon from now, else StakeManagerParameterOutOfRange
    /// (the amount or the lapse time, with the bound).
    /// @param providers Providers to reserve for.
    /// @param amounts Reserved token units per provider, at most its bonded stake less its job locks.
    /// @param until Unix time the reservations lapse.
    function reserveCollateral(address[] calldata providers, uint256[] calldata amounts, uint64 until) external;

    /// @notice The caller (a provider) bounds what the orchestrator role may reserve of its stake:
    /// at most `ceiling`, lapsing at most `horizon` seconds after the reservation is made or
    /// extended; `horizon` ≤ MAX_PERIOD, `ceiling` < 2**96. Until a provider sets terms, a reservation is bounded by its free
    /// stake and MAX_PERIOD only. The way down: a lower ceiling (0 lends nothing more) stops
    /// raises and extensions at once, but never shrinks or shortens a live reservation, which
    /// still backs the placements made on it until it lapses.
    function setReservationTerms(uint256 ceiling, uint256 horizon) external;

    // ------------------------------------------------------------------ escrow role (releases)

    /// @notice Releases all collateral `providers[i]` holds for `jobIds[i]`.
    /// @dev ESCROW_ROLE only. Pairs without a lock are skipped, so releasing twice is harmless.
    /// Emits CollateralReleased per released pair (settlement releases through `settleCollateral`).
    /// @param jobIds Job of each pair.
    /// @param providers Provider of each pair.
    function releaseCollateral(bytes32[] calldata jobIds, address[] calldata providers) external;

    /// @notice Settlement of (job, provider) pairs: for each pair, credits `payout` to
    /// `provider`'s pending payout (collateral is untouched: it stays slashable until the job's
    /// collateral slash window closes, paid or not), claimable from
    /// `releaseAt` (a pending payout already past its release time first becomes claimable).
    /// A payout never moves older pending payouts' release time: pending is kept in two buckets
    /// (the escrow rounds release times up to whole `PAYOUT_PERIOD`s and bounds its dispute window
    /// by one period, so at most two release times are ever in the future).
    /// @dev The JobEscrow (`jobEscrow()`) only, not any ESCROW_ROLE holder, since these books decide
    /// what the escrow pays out; it has checked the payouts against the jobs' escrow and holds the
    /// tokens. One slot per provider (its ledger). Takes
    /// the escrow's SoloSettlement layout so a `settleBatchSolo` forwards its calldata as it is;
    /// `resultRoot` is not used here.
    /// @param pairs (jobId, provider, payout, resultRoot) of each pair.
    /// @param releaseAt Unix time the credited payouts become claimable.
    function settleCollateral(IJobEscrow.SoloSettlement[] calldata pairs, uint256 releaseAt) external;

    /// @notice Empties `account`'s claimable payout (including pending past its release time) for
    /// the escrow to pay it out.
    /// @dev The JobEscrow only.
    /// @return amount Token units the escrow must pay `account`.
    function takeClaimable(address account) external returns (uint256 amount);

    /// @notice Takes `amount` out of `account`'s pending payout, to be held by a dispute about a
    /// job whose payouts are released at `releaseAt`: only from that release time's bucket.
    /// @dev The JobEscrow only; reverts with StakeManagerInsufficientPending when that bucket holds
    /// less.
    function freezePending(address account, uint256 amount, uint256 releaseAt) external;

    /// @notice Credits `amount` to `account`, claimable from `releaseAt` (at once when that has
    /// passed): a dispute's frozen funds released, back to the rest of their window or to the winner.
    /// @dev The JobEscrow only.
    function creditPayout(address account, uint256 amount, uint256 releaseAt) external;

    // ------------------------------------------------------------------ orchestrator role

    /// @notice Sets `provider`'s tier; emits TierChanged when it changes.
    /// @dev ORCHESTRATOR_ROLE only.
    function setTier(address provider, Tier tier) external;

    /// @notice Commits the Merkle root of epoch `epoch`'s scores, once.
    /// @dev ORCHESTRATOR_ROLE only. Leaf: keccak256(bytes.concat(keccak256(abi.encode(
    /// address provider, uint256 scoreBps, bytes32 telemetryDigest)))), sorted-pair tree.
    function commitEpoch(uint64 epoch, bytes32 scoreRoot) external;

    // ------------------------------------------------------------------ slashing

    /// @notice Slashes `provider`'s stake not tied to a job (free bonded first, then unbonding);
    /// proceeds go to the treasury after the dispute window.
    /// @dev SLASHER_ROLE only. Capped at what is slashable; reverts if nothing is.
    /// @return slashId Id of the pending slash.
    function slash(address provider, uint256 amount, SlashReason reason, bytes32 evidence)
        external
        returns (uint256 slashId);

    /// @notice Slashes collateral of `provider` for its placement `placement` on `jobId`: placement
    /// 0 is its job lock; any other a proven placement (`IJobEscrow.assignmentOf`), taken from its
    /// live reservation if that reservation was already live when the placement's root was
    /// committed (one made after a lapse backs no older leaf). Proceeds go to the job's customer
    /// after the dispute window.
    /// @dev SLASHER_ROLE only. Capped at the job lock still held (a placement: at what is left of
    /// that placement's collateral, whatever other placements lost, and of the reservation);
    /// reverts if nothing is, and once the job's collateral slash window has closed
    /// (`IJobEscrow.collateralReleasableAt`), paid or not. Writes a stake checkpoint.
    /// @return slashId Id of the pending slash.
    function slashCollateral(
        bytes32 jobId,
        address provider,
        uint256 placement,
        uint256 amount,
        SlashReason reason,
        bytes32 evidence
    ) external returns (uint256 slashId);

    /// @notice Commits to a score finding before revealing it with `slashForScore`, so a copied
    /// proof earns a front-runner nothing. `commitment` is
    /// keccak256(abi.encode(finder, provider, epoch, scoreBps, telemetryDigest, salt)): the finding
    /// itself, so a commitment made before the finding was known matches no copied reveal.
    function commitFinding(bytes32 commitment) external;

    /// @notice A finder holding a proof that `provider` scored under the threshold in `epoch`
    /// slashes the configured share of its stake and demotes it to Background. Once per
    /// (provider, epoch). The caller must have committed the finding (`commitFinding`) in an earlier
    /// block, must not be `provider`, and the epoch must have been committed at most
    /// `scoreProofWindow` ago. The share is of the provider's stake at the epoch's commit (never of
    /// stake added since), capped by what is slashable now; the caller gets the finder's share.
    /// @return slashId Id of the pending slash, or 0 when nothing was slashable (demotion only).
    function slashForScore(
        address provider,
        uint64 epoch,
        uint256 scoreBps,
        bytes32 telemetryDigest,
        bytes32[] calldata proof,
        bytes32 salt
    ) external returns (uint256 slashId);

    /// @notice Pays out a pending slash whose dispute window has passed. Anyone may call.
    function releaseSlash(uint256 slashId) external;

    /// @notice Freezes a pending slash inside its dispute window.
    /// @dev DISPUTES_ROLE only.
    function freezeSlash(uint256 slashId) external;

    /// @notice Ends the dispute of a frozen slash: reverse returns the stake to the provider's
    /// bonded stake (and a reversed score slash restores the tier it demoted); otherwise the slash
    /// becomes releasable.
    /// @dev DISPUTES_ROLE only.
    function resolveSlash(uint256 slashId, bool reverse) external;

    // ------------------------------------------------------------------ admin

    /// @notice Sets the unbonding period for new locks, at most `MAX_PERIOD`. DEFAULT_ADMIN_ROLE only.
    function setUnbondingPeriod(uint64 period) external;

    /// @notice Sets how long new slashes stay disputable, at most `MAX_PERIOD`. DEFAULT_ADMIN_ROLE only.
    function setSlashDisputeWindow(uint64 window) external;

    /// @notice Sets how long after its commit an epoch's score proofs are accepted, from 1 s to
    /// `MAX_PERIOD`. DEFAULT_ADMIN_ROLE only.
    function setScoreProofWindow(uint64 window) external;

    /// @notice Sets score slashing parameters, all in basis points. DEFAULT_ADMIN_ROLE only.
    function setScoreSlashing(uint16 thresholdBps, uint16 slashBps, uint16 finderBps) external;

    /// @notice Sets where slash proceeds without a customer go. DEFAULT_ADMIN_ROLE only.
    function setTreasury(address treasury) external;

    /// @notice Sets, once, the JobEscrow (customer look-ups) and grants it ESCROW_ROLE; it must use
    /// this StakeManager and its token. DEFAULT_ADMIN_ROLE only.
    function setJobEscrow(address escrow) external;

    // ------------------------------------------------------------------ views

    /// @notice Role that may set tiers and commit epochs.
    function ORCHESTRATOR_ROLE() external view returns (bytes32);
    /// @notice Role that may slash.
    function SLASHER_ROLE() external view returns (bytes32);
    /// @notice Role of the JobEscrow: lock and release collateral.
    function ESCROW_ROLE() external view returns (bytes32);
    /// @notice Role of the Disputes contract: freeze and resolve slashes.
    function DISPUTES_ROLE() external view returns (bytes32);
    /// @notice Most unbonding locks a provider may hold open at once.
    function MAX_UNBONDING_LOCKS() external view returns (uint256);
    /// @notice Longest unbonding period, slash dispute window and score proof window, seconds.
    function MAX_PERIOD() external view returns (uint256);

    /// @notice The stake and payment token.
    function token() external view returns (address);
    /// @notice `provider`'s bonded, locked, unbonding stake and tier.
    function stakeOf(address provider) external view returns (StakeInfo memory);
    /// @notice `provider`'s unbonding lock `lockId` (zero amount: none).
    function unbondingLock(address provider, uint256 lockId) external view returns (UnbondingLock memory);
    /// @notice Collateral `provider` has locked for `jobId`.
    function lockedFor(bytes32 jobId, address provider) external view returns (uint256);
    /// @notice `provider`'s live reservation (zero once lapsed) and when it lapses or lapsed.
    function reservationOf(address provider) external view returns (uint256 amount, uint256 until);
    /// @notice `provider`'s reservation terms ({setReservationTerms}); `set` false: none, and
    /// only its free stake and MAX_PERIOD bound a reservation.
    function reservationTermsOf(address provider) external view returns (bool set, uint256 ceiling, uint256 horizon);

    /// @notice What `slashCollateral` took so far from `provider`'s reservation for its placement
    /// `placement` on job `jobId`.
    function assignmentSlashed(bytes32 jobId, address provider, uint256 placement) external view returns (uint256);
    /// @notice `account`'s payout books as of now (pending past its release time shows as claimable).
    function payoutOf(address account) external view returns (Payout memory);
    /// @notice Score root of `epoch` (zero: not committed).
    function epochRoot(uint64 epoch) external view returns (bytes32);
    /// @notice Unix time `epoch`'s score root was committed (zero: not committed).
    function epochCommittedAt(uint64 epoch) external view returns (uint256);
    /// @notice `provider`'s bonded plus unbonding stake at unix time `at` (stake history).
    function stakeAt(address provider, uint256 at) external view returns (uint256);
    /// @notice Ids of `provider`'s open unbonding locks.
    function openLocks(address provider) external view returns (uint64[] memory);
    /// @notice Block in which finding `commitment` was committed (zero: none or used).
    function findingCommittedAt(bytes32 commitment) external view returns (uint256);
    /// @notice Seconds after an epoch's commit during which its score proofs are accepted.
    function scoreProofWindow() external view returns (uint64);
    /// @notice Whether `provider` was already slashed for its score in `epoch`.
    function scoreSlashed(address provider, uint64 epoch) external view returns (bool);
    /// @notice Slash record `slashId`.
    function slashOf(uint256 slashId) external view returns (Slash memory);
    /// @notice Number of slashes so far; ids run from 1 to this.
    function slashCount() external view returns (uint256);
    /// @notice Unbonding period for new locks, seconds.
    function unbondingPeriod() external view returns (uint64);
    /// @notice Dispute window of new slashes, seconds.
    function slashDisputeWindow() external view returns (uint64);
    /// @notice (thresholdBps, slashBps, finderBps) of score slashing.
    function scoreSlashing() external view returns (uint16 thresholdBps, uint16 slashBps, uint16 finderBps);
    /// @notice Receiver of slash proceeds without an injured customer.
    function treasury() external view returns (address);
    /// @notice The JobEscrow whose jobs collateral is locked for.
    function jobEscrow() external view returns (address);
}
