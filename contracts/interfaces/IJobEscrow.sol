// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @title IJobEscrow
/// @notice Customer payments for DePIN Mesh jobs: escrow, collateral locks, exactly-once
/// settlement with pull payments, deadline refunds.
/// @dev Settlement credits each provider's `pending` balance, which becomes `claimable` once the
/// settlement dispute window has passed (lazily, on the next credit or claim). This contract holds
/// the tokens; the books (pending and its release time, in the same StakeManager slot as the
/// provider's locked collateral, and claimable) are kept by the StakeManager, so one settlement
/// touches one storage slot per provider (see IStakeManager.settleCollateral). The customer's refund stays in
/// the job's own slot (settlement writes no customer storage) and is paid by `claimRefund` after
/// the window. Disputes freeze part of a provider's pending balance or of a job's refund until the
/// arbiter rules. Pausing stops new jobs and new collateral locks only: settle,
/// claim, reclaim and collateral release always work.
interface IJobEscrow {
    /// @notice Life of a job's escrow; same numbering as `orchestrator.chain.views.EscrowStatus`.
    enum JobStatus {
        None, // no such job
        Funded, // payment escrowed, not yet settled
        Settled, // paid out once; no further settlement
        Reclaimed // refunded to the customer after deadline + grace
    }

    /// @notice One job's escrow.
    struct Job {
        address customer; // who paid and receives refunds
        uint40 deadline; // unix time the work is due; reclaimable after deadline + grace
        uint40 settledAt; // unix time of settlement (0 until settled); disputes open until + window
        JobStatus status; // see JobStatus
        uint256 amount; // token units escrowed
        uint256 refund; // settled: part of `amount` owed back to the customer, until claimed
        bytes32 specHash; // keccak of the canonical job spec
    }

    /// @notice One job's settlement for `settleBatch`.
    struct Settlement {
        bytes32 jobId; // job to settle
        address[] providers; // payees; every provider with collateral for the job should be listed
        uint256[] payouts; // token units per provider (may be 0 to only release collateral)
        bytes32 resultRoot; // Merkle root of the job's results/checkpoints, emitted for disputes
    }

    /// @notice One single-provider job's settlement for `settleBatchSolo`: a Settlement with one
    /// provider, in 4 words of calldata instead of 9.
    struct SoloSettlement {
        bytes32 jobId; // job to settle
        address provider; // the payee; the provider with collateral for the job
        uint256 payout; // token units to the provider (may be 0 to only release collateral)
        bytes32 resultRoot; // Merkle root of the job's results/checkpoints, emitted for disputes
    }

    /// @notice An account's balances in escrow.
    struct Balance {
        uint256 claimable; // can be claimed now
        uint256 pending; // credited by settlement, claimable from `releaseAt`
        uint256 releaseAt; // unix time `pending` becomes claimable
        uint256 frozen; // held by an open dispute
    }

    // ------------------------------------------------------------------ errors

    /// @notice Job `jobId` already exists.
    error JobEscrowJobExists(bytes32 jobId);
    /// @notice A zero amount was given for job `jobId`.
    error JobEscrowZeroAmount(bytes32 jobId);
    /// @notice The deadline `deadline` is not after the current time `nowTs`.
    error JobEscrowDeadlineInPast(uint256 deadline, uint256 nowTs);
    /// @notice The token delivered `received` for a transfer of `expected` (fee-on-transfer token).
    error JobEscrowFeeOnTransferToken(uint256 expected, uint256 received);
    /// @notice Job `jobId` is not funded (status `status`).
    error JobEscrowJobNotFunded(bytes32 jobId, JobStatus status);
    /// @notice Job `jobId` was already settled.
    error JobEscrowAlreadySettled(bytes32 jobId);
    /// @notice Payouts of `total` exceed job `jobId`'s escrow of `amount`.
    error JobEscrowPayoutExceedsEscrow(bytes32 jobId, uint256 total, uint256 amount);
    /// @notice Arrays that must pair up have lengths `a` and `b`.
    error JobEscrowLengthMismatch(uint256 a, uint256 b);
    /// @notice Only the customer `customer` of job `jobId` may do this.
    error JobEscrowNotCustomer(bytes32 jobId, address customer);
    /// @notice Job `jobId` cannot be reclaimed before `reclaimableAt`.
    error JobEscrowNotReclaimableYet(bytes32 jobId, uint256 reclaimableAt);
    /// @notice `account` has nothing to claim.
    error JobEscrowNothingToClaim(address account);
    /// @notice Job `jobId`'s refund is claimable from `claimableAt`.
    error JobEscrowRefundNotClaimableYet(bytes32 jobId, uint256 claimableAt);
    /// @notice Job `jobId` has no refund to claim.
    error JobEscrowNoRefund(bytes32 jobId);
    /// @notice Job `jobId`'s settlement dispute window closed at `closedAt`.
    error JobEscrowDisputeWindowClosed(bytes32 jobId, uint256 closedAt);
    /// @notice `account` holds `available` frozen, less than the `requested` to unfreeze.
    error JobEscrowInsufficientFrozen(address account, uint256 requested, uint256 available);
    /// @notice An amount does not fit the packed storage (`amount` > `max`).
    error JobEscrowAmountTooLarge(uint256 amount, uint256 max);
    /// @notice Job `jobId` is not settled (status `status`).
    error JobEscrowJobNotSettled(bytes32 jobId, JobStatus status);
    /// @notice No job `jobId` exists.
    error JobEscrowUnknownJob(bytes32 jobId);
    /// @notice Job `jobId` could be settled (or collateral locked for it) until `closedAt`, its
    /// deadline + grace; after that only its customer's reclaim closes it.
    error JobEscrowSettlementClosed(bytes32 jobId, uint256 closedAt);
    /// @notice Collateral of job `jobId` stays slashable, and locked, until `releasableAt`.
    error JobEscrowCollateralStillSlashable(bytes32 jobId, uint256 releasableAt);
    /// @notice Disputes about job `jobId` may freeze `available` more from this side, not `requested`.
    error JobEscrowDisputeCapExceeded(bytes32 jobId, uint256 requested, uint256 available);
    /// @notice A parameter was set to `value`, outside [`min`, `max`].
    error JobEscrowParameterOutOfRange(uint256 value, uint256 min, uint256 max);
    /// @notice The zero address was given for `parameter`.
    error JobEscrowZeroAddress(string parameter);
    /// @notice The StakeManager uses token `stakeToken`, not this escrow's `token`.
    error JobEscrowTokenMismatch(address token, address stakeToken);
    /// @notice Assignment root `root` was committed before.
    error JobEscrowAssignmentsAlreadyCommitted(bytes32 root);
    /// @notice An assignment root of zero commits nothing.
    error JobEscrowZeroAssignmentRoot();
    /// @notice No committed assignment root holds (`jobId`, `provider`, `placement`, `collateral`)
    /// with this proof.
    error JobEscrowInvalidAssignmentProof(bytes32 jobId, address provider, uint256 placement, uint256 collateral);
    /// @notice Placement id 0 names a job lock (`IStakeManager.slashCollateral`), never a leaf.
    error JobEscrowZeroPlacement(bytes32 jobId, address provider);
    /// @notice No settlement committed a payout list with digest `digest`.
    error JobEscrowUnknownPayoutList(bytes32 digest);
    /// @notice The proven payout list does not pay `provider` for job `jobId`.
    error JobEscrowNotAPayee(bytes32 jobId, address provider);
    /// @notice A payee-side freeze needs what job `jobId` paid `account` proven first (`provePayout`).
    error JobEscrowPayoutNotProven(bytes32 jobId, address account);

    // ------------------------------------------------------------------ events

    /// @notice `customer` escrowed `amount` for job `jobId`.
    event JobCreated(bytes32 indexed jobId, address indexed customer, uint256 amount, uint256 deadline, bytes32 specHash);
    /// @notice Job `jobId` settled by `settle`: `refund` owed to the customer, the rest (job amount -
    /// refund) paid to providers (pending), and the listed providers' collateral released.
    /// @dev Per-provider payouts are not logged, to keep settlement cheap: they are in the settling
    /// transaction's input, and in `balanceOf`.
    event JobSettled(bytes32 indexed jobId, uint256 refund, bytes32 resultRoot);
    /// @notice Jobs `jobIds` settled by one `settleBatch` or `settleBatchSolo`, each as JobSettled
    /// describes.
    /// @dev One log per batch instead of one per job saves ~1.4k gas a job; each job's refund is in
    /// `jobOf`, its result root and payouts in the transaction's input.
    event JobsSettled(bytes32[] jobIds);
    /// @notice The customer took back `amount` of job `jobId` after deadline + grace.
    event JobReclaimed(bytes32 indexed jobId, address indexed customer, uint256 amount);
    /// @notice `account` claimed `amount`.
    event Claimed(address indexed account, uint256 amount);
    /// @notice The customer of job `jobId` was paid its refund of `amount`.
    event RefundClaimed(bytes32 indexed jobId, address indexed customer, uint256 amount);
    /// @notice `amount` of `account`'s pending balance was frozen by a dispute over job `jobId`.
    event PayoutFrozen(bytes32 indexed jobId, address indexed account, uint256 amount);
    /// @notice `amount` frozen from `from` over job `jobId` went to `to`: back to the rest of the
    /// job's dispute window when `to == from`, else claimable at once.
    event PayoutUnfrozen(bytes32 indexed jobId, address indexed from, address indexed to, uint256 amount);
    /// @notice `settle` credited `payout` to `provider` for job `jobId` (batches: see JobsSettled).
    event ProviderPaid(bytes32 indexed jobId, address indexed provider, uint256 payout);
    /// @notice Collateral of a closed job stays slashable for `window` seconds after it closes.
    event CollateralSlashWindowSet(uint256 window);
    /// @notice The reclaim grace period is now `grace` seconds.
    event GracePeriodSet(uint256 grace);
    /// @notice The settlement dispute window is now `window` seconds.
    event DisputeWindowSet(uint256 window);
    /// @notice The orchestrator committed `root`, a Merkle root of (job, provider, collateral)
    /// assignments backed by the providers' standing reservations.
    event AssignmentsCommitted(bytes32 indexed root);
    /// @notice `provider`'s placement `placement` on `jobId` with `collateral` was proven on chain.
    event AssignmentProven(bytes32 indexed jobId, address indexed provider, uint256 placement, uint256 collateral);
    /// @notice A settlement committed the list of (job, provider, payout, resultRoot) pairs it paid,
    /// `digest` = keccak256(abi.encode(pairs)) (SoloSettlement[]), for `provePayout`.
    event PayoutsCommitted(bytes32 indexed digest);
    /// @notice Job `jobId` was proven to have paid `provider` `paid` (`provePayout`).
    event PayoutProven(bytes32 indexed jobId, address indexed provider, uint256 paid);

    // ------------------------------------------------------------------ customer

    /// @notice Escrows `amount` for job `jobId`, pulled from the caller (the customer).
    /// @dev Reverts on a duplicate id, zero amount, deadline not in the future, when paused, and for
    /// fee-on-transfer tokens.
    function createJob(bytes32 jobId, uint256 amount, uint64 deadline, bytes32 specHash) external;

    /// @notice Customer takes back the whole escrow of a job not settled by deadline + grace.
    /// @dev Works while paused. Settlement closes at deadline + grace, so reclaim and settle never
    /// race. Collateral is freed with `releaseCollateral` after the collateral slash window.
    function reclaim(bytes32 jobId) external;

    /// @notice Pays the caller everything claimable (including pending whose window has passed).
    /// @return amount Token units paid.
    function claim() external returns (uint256 amount);

    /// @notice Pays a settled job's refund to its customer once the dispute window has passed,
    /// or at once when the settlement paid nobody and nothing of the refund is frozen (the refund
    /// is the whole escrow: a failed, cancelled or unplaceable job). Anyone may call; the refund
    /// always goes to the customer.
    /// @return amount Token units paid.
    function claimRefund(bytes32 jobId) external returns (uint256 amount);

    /// @notice Frees collateral still locked for job `jobId` once `collateralReleasableAt(jobId)`
    /// has passed: a settled job's slash window after settlement, otherwise after deadline + grace
    /// (whether or not the customer reclaimed, so a provider always has a way out). Anyone may call.
    function releaseCollateral(bytes32 jobId, address[] calldata providers) external;

    /// @notice Proves that `provider` backs `jobId` with `collateral` in its placement `placement`
    /// (a task attempt; not 0) under a committed assignment root: from then on the provider is a
    /// backer of the job (disputes may name it) and its reservation is slashable for that placement
    /// up to `collateral` (`IStakeManager.slashCollateral`) while the job's collateral slash window
    /// is open, whatever else was proven or slashed. Anyone may call; proving again is a no-op.
    /// @param proof Sibling hashes from the leaf to a root committed by {commitAssignments}.
    function proveAssignment(
        bytes32 jobId,
        address provider,
        uint256 placement,
        uint256 collateral,
        bytes32[] calldata proof
    ) external;

    /// @notice Proves what settled job `jobId` paid `provider`: the sum of its pairs in `pairs`, the
    /// list a settlement committed (`PayoutsCommitted`; for `settleBatchSolo` its argument, for
    /// `settle`/`settleBatch` each job's providers in order). A payee-side freeze about the job is
    /// capped by it. The provider becomes a backer of the job. Anyone may call; again is a no-op.
    function provePayout(bytes32 jobId, address provider, SoloSettlement[] calldata pairs) external;

    // ------------------------------------------------------------------ orchestrator role

    /// @notice Locks providers' stake as collateral for funded job `jobId` on the StakeManager; the
    /// providers become the job's backers (the payees a customer may dispute).
    /// @dev ORCHESTRATOR_ROLE only; not while paused; not after deadline + grace.
    function lockCollateral(bytes32 jobId, address[] calldata providers, uint256[] calldata amounts) external;

    /// @notice Commits `root`, the Merkle root (sorted pairs, double-hashed leaves
    /// `keccak256(bytes.concat(keccak256(abi.encode(jobId, provider, placement, collateral))))`) of a
    /// batch of assignments: each says `provider` backs its placement `placement` on job `jobId`
    /// with `collateral` of its standing reservation (`IStakeManager.reserveCollateral`).
    /// @dev ORCHESTRATOR_ROLE only, not while paused. One storage word per batch and none per job:
    /// the orchestrator's cheap path for collateral. An assignment counts once proven
    /// ({proveAssignment}); the orchestrator keeps each batch's leaves to build the proofs.
    function commitAssignments(bytes32 root) external;

    /// @notice Settles job `jobId` exactly once: pays providers (pending, pull) and credits the
    /// rest of the escrow to the customer; collateral stays slashable until
    /// `collateralReleasableAt`. Commits the payout list (`PayoutsCommitted`). All-or-nothing.
    /// @dev ORCHESTRATOR_ROLE only; until deadline + the grace at the job's creation. Payouts are claimable from
    /// `payoutReleaseAt(now)`: now + dispute window, rounded up to a whole PAYOUT_PERIOD.
    function settle(bytes32 jobId, address[] calldata providers, uint256[] calldata payouts, bytes32 resultRoot)
        external;

    /// @notice Settles many jobs in one transaction; all-or-nothing.
    /// @dev ORCHESTRATOR_ROLE only.
    function settleBatch(Settlement[] calldata settlements) external;

    /// @notice Settles many single-provider jobs in one transaction; all-or-nothing. Same effect as
    /// `settleBatch` with one provider per job, with less calldata and decoding.
    /// @dev ORCHESTRATOR_ROLE only.
    function settleBatchSolo(SoloSettlement[] calldata settlements) external;

    // ------------------------------------------------------------------ disputes role

    /// @notice Freezes `amount` of `account`'s pending balance (or, when `account` is the job's
    /// customer, of the job's refund) for a dispute over settled job `jobId`.
    /// @dev DISPUTES_ROLE only; inside the job's dispute window (the one it was settled under).
    /// From a payee, all disputes of the job together freeze at most what the job paid that payee
    /// (`provePayout` first), taken only from the pending bucket the job's payout went to; from the
    /// customer, at most the job's refund.
    function freezePayout(bytes32 jobId, address account, uint256 amount) external;

    /// @notice Ends the freeze of `amount` taken from `from` over job `jobId`: to `to` (the winner),
    /// claimable at once; or back to `from` (`to == from`), claimable at the release time the
    /// job's settlement set (a refund goes back into the job's refund).
    /// @dev DISPUTES_ROLE only.
    function unfreezePayout(bytes32 jobId, address from, address to, uint256 amount) external;

    // ------------------------------------------------------------------ admin

    /// @notice Stops new jobs and collateral locks. DEFAULT_ADMIN_ROLE only.
    function pause() external;
    /// @notice Resumes new jobs and collateral locks. DEFAULT_ADMIN_ROLE only.
    function unpause() external;
    /// @notice Sets the reclaim grace period of jobs created from now on, at most MAX_PERIOD.
    /// DEFAULT_ADMIN_ROLE only.
    function setGracePeriod(uint64 grace) external;
    /// @notice Sets the dispute window of jobs settled from the next second on, at most
    /// PAYOUT_PERIOD. DEFAULT_ADMIN_ROLE only.
    function setDisputeWindow(uint64 window) external;
    /// @notice Sets how long collateral of a closed job stays slashable, for jobs created from the
    /// next second on, at most MAX_PERIOD. DEFAULT_ADMIN_ROLE only.
    function setCollateralSlashWindow(uint64 window) external;

    // ------------------------------------------------------------------ views

    /// @notice Role that may lock collateral and settle.
    function ORCHESTRATOR_ROLE() external view returns (bytes32);
    /// @notice Role of the Disputes contract: freeze and unfreeze payouts.
    function DISPUTES_ROLE() external view returns (bytes32);
    /// @notice The payment token.
    function token() external view returns (address);
    /// @notice The StakeManager collateral is locked on.
    function stakeManager() external view returns (address);
    /// @notice Job `jobId`'s escrow.
    function jobOf(bytes32 jobId) external view returns (Job memory);
    /// @notice `account`'s balances, as of now (pending past its release time shows as claimable).
    function balanceOf(address account) external view returns (Balance memory);
    /// @notice Seconds after the deadline before a customer may reclaim.
    function gracePeriod() external view returns (uint64);
    /// @notice Seconds after settlement during which disputes may open and payouts stay pending.
    function disputeWindow() external view returns (uint64);
    /// @notice Seconds collateral of a closed job stays slashable (and locked) after it closes.
    function collateralSlashWindow() external view returns (uint64);
    /// @notice Payout release times are whole multiples of this; the dispute window is at most one.
    function PAYOUT_PERIOD() external view returns (uint256);
    /// @notice Longest grace period and collateral slash window, seconds.
    function MAX_PERIOD() external view returns (uint256);
    /// @notice When a payout settled at `settledAt` becomes claimable: settledAt + dispute window,
    /// rounded up to a whole PAYOUT_PERIOD.
    function payoutReleaseAt(uint256 settledAt) external view returns (uint256);
    /// @notice From when collateral still locked for job `jobId` may be released (and no longer
    /// slashed); zero for an unknown job.
    function collateralReleasableAt(bytes32 jobId) external view returns (uint256);
    /// @notice Whether `provider` is a party to job `jobId`'s disputes: the job's settlement listed
    /// it, proven with {provePayout} (paid, or paid nothing for work it took). A proven placement
    /// or a job lock alone (the orchestrator's acts, not the provider's) does not make one.
    function isBacker(bytes32 jobId, address provider) external view returns (bool);
    /// @notice Whether `provider`'s placement `placement` on `jobId` was proven, with what collateral,
    /// and the latest commit time of a root it was proven from: only a reservation live since then
    /// backs it (`IStakeManager.slashCollateral`).
    function assignmentOf(bytes32 jobId, address provider, uint256 placement)
        external
        view
        returns (bool proven, uint256 collateral, uint256 committedAt);
    /// @notice When assignment root `root` was committed (zero: never).
    function assignmentsCommittedAt(bytes32 root) external view returns (uint256);
    /// @notice Whether what job `jobId` paid `provider` was proven, what it paid, and what disputes
    /// froze of it so far (all-time).
    function payeeOf(bytes32 jobId, address provider) external view returns (bool proven, uint256 paid, uint256 frozen);
    /// @notice Whether a settlement committed the payout list with digest `digest`.
    function payoutListCommitted(bytes32 digest) external view returns (bool);
}
