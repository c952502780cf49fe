// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControlDefaultAdminRules} from
    "@openzeppelin/contracts/access/extensions/AccessControlDefaultAdminRules.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {Checkpoints} from "@openzeppelin/contracts/utils/structs/Checkpoints.sol";

import {IJobEscrow} from "./interfaces/IJobEscrow.sol";
import {IStakeManager} from "./interfaces/IStakeManager.sol";

/// @title JobEscrow
/// @notice Customer escrow and exactly-once settlement of DePIN Mesh jobs. See {IJobEscrow}.
/// @dev Storage is laid out for cheap settlement: a job's amount, refund, settlement time and
/// status share one slot (the only job slot settlement reads or writes). This contract holds the
/// payout tokens, but the payout books live in the StakeManager, in the same slot as the
/// provider's locked collateral: settling a job releases the collateral and credits the payout
/// with one storage write per provider, and the customer's refund costs none.
contract JobEscrow is IJobEscrow, AccessControlDefaultAdminRules, Pausable, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;
    using SafeCast for uint256;
    using Checkpoints for Checkpoints.Trace208;

    /// @inheritdoc IJobEscrow
    bytes32 public constant ORCHESTRATOR_ROLE = keccak256("ORCHESTRATOR_ROLE");
    /// @inheritdoc IJobEscrow
    bytes32 public constant DISPUTES_ROLE = keccak256("DISPUTES_ROLE");
    /// @inheritdoc IJobEscrow
    uint256 public constant PAYOUT_PERIOD = 1 days;
    /// @inheritdoc IJobEscrow
    uint256 public constant MAX_PERIOD = 30 days;

    /// @dev Delay of a two-step transfer of DEFAULT_ADMIN_ROLE (AccessControlDefaultAdminRules).
    uint48 private constant ADMIN_TRANSFER_DELAY = 2 days;

    /// @dev One job, three slots; settlement reads and writes only `head`, in one SLOAD and one
    /// SSTORE (see {_packHead} / {_unpackHead}).
    struct JobRecord {
        uint256 head; // packed JobHead
        address customer; // who paid and receives the refund
        uint40 deadline; // unix time the work is due
        uint40 createdAt; // unix time of createJob: the collateral slash window is the one set then
        bytes32 specHash; // keccak of the canonical job spec
    }

    /// @dev The part of a job settlement changes, packed into `JobRecord.head`.
    struct JobHead {
        uint96 amount; // token units escrowed
        uint96 refund; // settled: owed back to the customer until claimed (less any frozen part)
        uint40 time; // Settled: unix time of settlement; otherwise when settlement closes (deadline + grace at creation)
        JobStatus status; // see JobStatus
    }

    /// @dev (job, provider, payout) pairs a settlement hands to the StakeManager in one call.
    struct PayoutList {
        SoloSettlement[] pairs; // one per listed provider of each job
        uint256 count; // pairs filled so far
    }

    // Bit offsets of the packed JobHead word: amount | refund | time | status.
    uint256 private constant _REFUND_SHIFT = 96;
    uint256 private constant _SETTLED_AT_SHIFT = 192; // the `time` field
    uint256 private constant _STATUS_SHIFT = 232;
    // A proven assignment word: this flag | collateral (uint96) | the latest commit time of a root
    // it was proven from (uint40) << _FROZEN_SHIFT; non-zero even for no collateral.
    // A proven payout word: this flag | paid (uint96) | frozen so far (uint96) << _FROZEN_SHIFT.
    uint256 private constant _PROVEN = 1 << 255;
    uint256 private constant _FROZEN_SHIFT = 96;

    IERC20 private immutable _token;
    IStakeManager private immutable _stakeManager;

    mapping(bytes32 jobId => JobRecord) private _jobs;
    mapping(address account => uint256) private _frozen;
    mapping(bytes32 root => uint256 committedAt) private _assignmentRoots;
    // _PROVEN | collateral, per placement
    mapping(bytes32 jobId => mapping(address provider => mapping(uint256 placement => uint256))) private _assignments;
    mapping(bytes32 digest => bool) private _payoutLists; // keccak256(abi.encode(pairs)) of each settlement
    mapping(bytes32 jobId => mapping(address provider => uint256)) private _payees; // _PROVEN | paid | frozen

    uint64 private _gracePeriod;
    // Each parameter a job keeps, by the time it took effect (the second after it was set).
    Checkpoints.Trace208 private _disputeWindows;
    Checkpoints.Trace208 private _collateralSlashWindows;

    /// @notice Deploy after the StakeManager; then the StakeManager admin calls
    /// `stakeManager.setJobEscrow(address(this))` so this contract may lock collateral.
    /// @param token_ The payment ERC-20 (the same token the StakeManager stakes).
    /// @param stakeManager_ The StakeManager collateral is locked on.
    /// @param admin Receives DEFAULT_ADMIN_ROLE (pause, parameters, role grants).
    /// @param gracePeriod_ Seconds after a job's deadline before its customer may reclaim.
    /// @param disputeWindow_ Seconds after settlement that payouts stay pending and disputable.
    /// The collateral slash window starts at one day ({setCollateralSlashWindow}).
    constructor(IERC20 token_, IStakeManager stakeManager_, address admin, uint64 gracePeriod_, uint64 disputeWindow_)
        AccessControlDefaultAdminRules(ADMIN_TRANSFER_DELAY, admin)
    {
        if (address(token_) == address(0)) revert JobEscrowZeroAddress("token");
        if (address(stakeManager_) == address(0)) revert JobEscrowZeroAddress("stakeManager");
        address stakeToken = stakeManager_.token();
        if (stakeToken != address(token_)) revert JobEscrowTokenMismatch(address(token_), stakeToken);
        _checkRange(gracePeriod_, 0, MAX_PERIOD);
        _checkRange(disputeWindow_, 0, PAYOUT_PERIOD);
        _token = token_;
        _stakeManager = stakeManager_;
        _gracePeriod = gracePeriod_;
        // slither-disable-next-line unused-return
        _disputeWindows.push(0, disputeWindow_);
        // slither-disable-next-line unused-return
        _collateralSlashWindows.push(0, 1 days);
        emit GracePeriodSet(gracePeriod_);
        emit DisputeWindowSet(disputeWindow_);
        emit CollateralSlashWindowSet(1 days);
    }

    // ------------------------------------------------------------------ customer

    /// @inheritdoc IJobEscrow
    function createJob(bytes32 jobId, uint256 amount, uint64 deadline, bytes32 specHash)
        external
        nonReentrant
        whenNotPaused
    {
        if (_jobs[jobId].head != 0) revert JobEscrowJobExists(jobId);
        if (amount == 0) revert JobEscrowZeroAmount(jobId);
        if (amount > type(uint96).max) revert JobEscrowAmountTooLarge(amount, type(uint96).max);
        if (deadline <= block.timestamp) revert JobEscrowDeadlineInPast(deadline, block.timestamp);
        uint40 closesAt = (uint256(deadline) + _gracePeriod).toUint40();
        _jobs[jobId] = JobRecord({
            head: _packHead(JobHead({amount: uint96(amount), refund: 0, time: closesAt, status: JobStatus.Funded})),
            customer: msg.sender,
            deadline: uint256(deadline).toUint40(),
            createdAt: uint40(block.timestamp),
            specHash: specHash
        });
        emit JobCreated(jobId, msg.sender, amount, deadline, specHash);
        uint256 before = _token.balanceOf(address(this));
        _token.safeTransferFrom(msg.sender, address(this), amount);
        uint256 received = _token.balanceOf(address(this)) - before;
        if (received != amount) revert JobEscrowFeeOnTransferToken(amount, received);
    }

    /// @inheritdoc IJobEscrow
    function reclaim(bytes32 jobId) external nonReentrant {
        JobRecord storage job = _jobs[jobId];
        JobHead memory head = _unpackHead(job.head);
        if (head.status != JobStatus.Funded) revert JobEscrowJobNotFunded(jobId, head.status);
        address customer = job.customer;
        if (msg.sender != customer) revert JobEscrowNotCustomer(jobId, customer);
        uint256 reclaimableAt = head.time; // deadline + the grace at creation
        if (block.timestamp <= reclaimableAt) revert JobEscrowNotReclaimableYet(jobId, reclaimableAt);
        head.status = JobStatus.Reclaimed;
        job.head = _packHead(head);
        uint256 amount = head.amount;
        emit JobReclaimed(jobId, customer, amount);
        _token.safeTransfer(customer, amount);
    }

    /// @inheritdoc IJobEscrow
    function claim() external nonReentrant returns (uint256 amount) {
        amount = _stakeManager.takeClaimable(msg.sender);
        if (amount == 0) revert JobEscrowNothingToClaim(msg.sender);
        emit Claimed(msg.sender, amount);
        _token.safeTransfer(msg.sender, amount);
    }

    /// @inheritdoc IJobEscrow
    function claimRefund(bytes32 jobId) external nonReentrant returns (uint256 amount) {
        JobRecord storage job = _jobs[jobId];
        JobHead memory head = _unpackHead(job.head);
        if (head.status != JobStatus.Settled) revert JobEscrowJobNotSettled(jobId, head.status);
        amount = head.refund;
        // slither-disable-next-line incorrect-equality
        if (amount == 0) revert JobEscrowNoRefund(jobId);
        // A settlement that paid nobody refunds the whole escrow at once: it leaves backers what
        // `reclaim` would (no window), so waiting would only hold the customer's money.
        if (amount != head.amount) {
            uint256 claimableAt = uint256(head.time) + _disputeWindowAt(head.time);
            if (block.timestamp < claimableAt) revert JobEscrowRefundNotClaimableYet(jobId, claimableAt);
        }
        head.refund = 0;
        job.head = _packHead(head);
        address customer = job.customer;
        emit RefundClaimed(jobId, customer, amount);
        _token.safeTransfer(customer, amount);
    }

    /// @inheritdoc IJobEscrow
    function releaseCollateral(bytes32 jobId, address[] calldata providers) external {
        uint256 releasableAt = collateralReleasableAt(jobId);
        // slither-disable-next-line incorrect-equality
        if (releasableAt == 0) revert JobEscrowUnknownJob(jobId);
        if (block.timestamp < releasableAt) revert JobEscrowCollateralStillSlashable(jobId, releasableAt);
        bytes32[] memory jobIds = new bytes32[](providers.length);
        for (uint256 i; i < providers.length; ++i) {
            jobIds[i] = jobId;
        }
        _stakeManager.releaseCollateral(jobIds, providers);
    }

    /// @inheritdoc IJobEscrow
    function proveAssignment(
        bytes32 jobId,
        address provider,
        uint256 placement,
        uint256 collateral,
        bytes32[] calldata proof
    ) external {
        if (placement == 0) revert JobEscrowZeroPlacement(jobId, provider);
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(jobId, provider, placement, collateral))));
        uint256 committedAt = _assignmentRoots[MerkleProof.processProofCalldata(proof, leaf)];
        // slither-disable-next-line incorrect-equality
        if (committedAt == 0) revert JobEscrowInvalidAssignmentProof(jobId, provider, placement, collateral);
        mapping(uint256 => uint256) storage placements = _assignments[jobId][provider];
        uint256 word = placements[placement];
        if (word != 0) {
            // Proven before: a placement has one collateral (its first proof fixes it), and keeps
            // the latest commit of a root holding that leaf (the reservation live then backs it).
            if (uint96(word) == collateral && committedAt > uint40(word >> _FROZEN_SHIFT)) {
                placements[placement] = _PROVEN | uint96(word) | (committedAt << _FROZEN_SHIFT);
            }
            return;
        }
        placements[placement] = _PROVEN | collateral.toUint96() | (committedAt << _FROZEN_SHIFT);
        emit AssignmentProven(jobId, provider, placement, collateral);
    }

    /// @inheritdoc IJobEscrow
    function provePayout(bytes32 jobId, address provider, SoloSettlement[] calldata pairs) external {
        bytes32 digest = keccak256(abi.encode(pairs));
        if (!_payoutLists[digest]) revert JobEscrowUnknownPayoutList(digest);
        if (_payees[jobId][provider] != 0) return; // proven before
        // slither-disable-next-line uninitialized-local
        uint256 paid;
        // slither-disable-next-line uninitialized-local
        bool listed;
        for (uint256 i; i < pairs.length; ++i) {
            if (pairs[i].jobId == jobId && pairs[i].provider == provider) {
                paid += pairs[i].payout;
                listed = true;
            }
        }
        if (!listed) revert JobEscrowNotAPayee(jobId, provider);
        _payees[jobId][provider] = _PROVEN | paid; // paid <= the job's uint96 amount
        emit PayoutProven(jobId, provider, paid);
    }

    // ------------------------------------------------------------------ orchestrator role

    /// @inheritdoc IJobEscrow
    function commitAssignments(bytes32 root) external onlyRole(ORCHESTRATOR_ROLE) whenNotPaused {
        if (root == bytes32(0)) revert JobEscrowZeroAssignmentRoot();
        if (_assignmentRoots[root] != 0) revert JobEscrowAssignmentsAlreadyCommitted(root);
        _assignmentRoots[root] = block.timestamp;
        emit AssignmentsCommitted(root);
    }

    /// @inheritdoc IJobEscrow
    function lockCollateral(bytes32 jobId, address[] calldata providers, uint256[] calldata amounts)
        external
        onlyRole(ORCHESTRATOR_ROLE)
        whenNotPaused
    {
        JobHead memory head = _unpackHead(_jobs[jobId].head);
        if (head.status != JobStatus.Funded) revert JobEscrowJobNotFunded(jobId, head.status);
        uint256 closedAt = head.time;
        if (block.timestamp > closedAt) revert JobEscrowSettlementClosed(jobId, closedAt);
        _stakeManager.lockCollateral(jobId, providers, amounts);
    }

    /// @inheritdoc IJobEscrow
    function settle(bytes32 jobId, address[] calldata providers, uint256[] calldata payouts, bytes32 resultRoot)
        external
        onlyRole(ORCHESTRATOR_ROLE)
    {
        PayoutList memory list = _newPayoutList(providers.length);
        uint256 refund = _settle(jobId, providers, payouts, resultRoot, list);
        emit JobSettled(jobId, refund, resultRoot);
        for (uint256 i; i < providers.length; ++i) {
            emit ProviderPaid(jobId, providers[i], payouts[i]);
        }
        _commitPayouts(keccak256(abi.encode(list.pairs)));
        _stakeManager.settleCollateral(list.pairs, payoutReleaseAt(block.timestamp));
    }

    /// @inheritdoc IJobEscrow
    function settleBatch(Settlement[] calldata settlements) external onlyRole(ORCHESTRATOR_ROLE) {
        // slither-disable-next-line uninitialized-local
        uint256 pairs;
        for (uint256 j; j < settlements.length; ++j) {
            pairs += settlements[j].providers.length;
        }
        PayoutList memory list = _newPayoutList(pairs);
        bytes32[] memory jobIds = new bytes32[](settlements.length);
        for (uint256 j; j < settlements.length; ++j) {
            Settlement calldata s = settlements[j];
            bytes32 jobId = s.jobId;
            _settle(jobId, s.providers, s.payouts, s.resultRoot, list);
            jobIds[j] = jobId;
        }
        emit JobsSettled(jobIds);
        _commitPayouts(keccak256(abi.encode(list.pairs)));
        _stakeManager.settleCollateral(list.pairs, payoutReleaseAt(block.timestamp));
    }

    /// @inheritdoc IJobEscrow
    function settleBatchSolo(SoloSettlement[] calldata settlements) external onlyRole(ORCHESTRATOR_ROLE) {
        uint256 count = settlements.length;
        bytes32[] memory jobIds = new bytes32[](count);
        for (uint256 j; j < count; ++j) {
            SoloSettlement calldata s = settlements[j];
            bytes32 jobId = s.jobId;
            _closeJob(jobId, s.payout);
            assembly ("memory-safe") {
                mstore(add(jobIds, shl(5, add(j, 1))), jobId) // jobIds[j], j < count
            }
        }
        emit JobsSettled(jobIds);
        _commitPayouts(keccak256(abi.encode(settlements)));
        _stakeManager.settleCollateral(settlements, payoutReleaseAt(block.timestamp));
    }

    // ------------------------------------------------------------------ disputes role

    /// @inheritdoc IJobEscrow
    function freezePayout(bytes32 jobId, address account, uint256 amount) external onlyRole(DISPUTES_ROLE) {
        JobRecord storage job = _jobs[jobId];
        JobHead memory head = _unpackHead(job.head);
        if (head.status != JobStatus.Settled) revert JobEscrowJobNotSettled(jobId, head.status);
        uint256 closedAt = uint256(head.time) + _disputeWindowAt(head.time);
        if (block.timestamp >= closedAt) revert JobEscrowDisputeWindowClosed(jobId, closedAt);
        bool fromRefund = account == job.customer;
        if (fromRefund) {
            if (amount > head.refund) revert JobEscrowDisputeCapExceeded(jobId, amount, head.refund);
            head.refund -= uint96(amount);
            job.head = _packHead(head);
        } else {
            // Capped by what this job paid this payee (proven with `provePayout`), less what
            // disputes froze of it before (all-time, so a freed amount is not frozen again).
            uint256 word = _payees[jobId][account];
            // slither-disable-next-line incorrect-equality
            if (word == 0) revert JobEscrowPayoutNotProven(jobId, account);
            uint256 available = uint96(word) - uint96(word >> _FROZEN_SHIFT);
            if (amount > available) revert JobEscrowDisputeCapExceeded(jobId, amount, available);
            _payees[jobId][account] = word + (amount << _FROZEN_SHIFT); // frozen <= paid < 2**96
        }
        _frozen[account] += amount;
        emit PayoutFrozen(jobId, account, amount);
        if (!fromRefund) _stakeManager.freezePending(account, amount, payoutReleaseAt(head.time));
    }

    /// @inheritdoc IJobEscrow
    function unfreezePayout(bytes32 jobId, address from, address to, uint256 amount) external onlyRole(DISPUTES_ROLE) {
        uint256 frozen = _frozen[from];
        if (amount > frozen) revert JobEscrowInsufficientFrozen(from, amount, frozen);
        _frozen[from] = frozen - amount;
        emit PayoutUnfrozen(jobId, from, to, amount);
        JobRecord storage job = _jobs[jobId];
        if (to != from) {
            _stakeManager.creditPayout(to, amount, 0); // a ruling: the winner may claim at once
        } else if (from == job.customer) {
            JobHead memory head = _unpackHead(job.head);
            head.refund += amount.toUint96(); // claimRefund waits for the job's window
            job.head = _packHead(head);
        } else {
            // Back to the payee at the release time settlement set (claimable at once if past).
            _stakeManager.creditPayout(from, amount, payoutReleaseAt(_unpackHead(job.head).time));
        }
    }

    // ------------------------------------------------------------------ admin

    /// @inheritdoc IJobEscrow
    function pause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _pause();
    }

    /// @inheritdoc IJobEscrow
    function unpause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unpause();
    }

    /// @inheritdoc IJobEscrow
    function setGracePeriod(uint64 grace) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _checkRange(grace, 0, MAX_PERIOD);
        _gracePeriod = grace;
        emit GracePeriodSet(grace);
    }

    /// @inheritdoc IJobEscrow
    function setDisputeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _checkRange(window, 0, PAYOUT_PERIOD);
        _pushParameter(_disputeWindows, window);
        emit DisputeWindowSet(window);
    }

    /// @inheritdoc IJobEscrow
    function setCollateralSlashWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _checkRange(window, 0, MAX_PERIOD);
        _pushParameter(_collateralSlashWindows, window);
        emit CollateralSlashWindowSet(window);
    }

    // ------------------------------------------------------------------ views

    /// @inheritdoc IJobEscrow
    function token() external view returns (address) {
        return address(_token);
    }

    /// @inheritdoc IJobEscrow
    function stakeManager() external view returns (address) {
        return address(_stakeManager);
    }

    /// @inheritdoc IJobEscrow
    function jobOf(bytes32 jobId) external view returns (Job memory) {
        JobRecord storage job = _jobs[jobId];
        JobHead memory head = _unpackHead(job.head);
        // slither-disable-next-line incorrect-equality
        return Job({
            customer: job.customer,
            deadline: job.deadline,
            settledAt: head.status == JobStatus.Settled ? head.time : 0,
            status: head.status,
            amount: head.amount,
            refund: head.refund,
            specHash: job.specHash
        });
    }

    /// @inheritdoc IJobEscrow
    function balanceOf(address account) external view returns (Balance memory) {
        IStakeManager.Payout memory p = _stakeManager.payoutOf(account);
        return Balance({claimable: p.claimable, pending: p.pending, releaseAt: p.releaseAt, frozen: _frozen[account]});
    }

    /// @inheritdoc IJobEscrow
    function gracePeriod() external view returns (uint64) {
        return _gracePeriod;
    }

    /// @inheritdoc IJobEscrow
    function disputeWindow() external view returns (uint64) {
        return uint64(_disputeWindows.latest());
    }

    /// @inheritdoc IJobEscrow
    function collateralSlashWindow() external view returns (uint64) {
        return uint64(_collateralSlashWindows.latest());
    }

    /// @inheritdoc IJobEscrow
    function payoutReleaseAt(uint256 settledAt) public view returns (uint256) {
        // Rounded up to whole periods, so one provider's pending payouts have at most two release
        // times in the future (the StakeManager keeps two buckets) and none moves another's.
        uint256 due = settledAt + _disputeWindowAt(settledAt);
        // slither-disable-next-line divide-before-multiply
        return (due + PAYOUT_PERIOD - 1) / PAYOUT_PERIOD * PAYOUT_PERIOD;
    }

    /// @inheritdoc IJobEscrow
    function collateralReleasableAt(bytes32 jobId) public view returns (uint256) {
        JobRecord storage job = _jobs[jobId];
        JobHead memory head = _unpackHead(job.head);
        // slither-disable-next-line incorrect-equality
        if (head.status == JobStatus.None) return 0;
        // A settled job closed at settlement; any other when settlement did (deadline + grace),
        // in both cases `time`. The window is the one set when the job was created.
        return uint256(head.time) + _collateralSlashWindows.upperLookupRecent(job.createdAt);
    }

    /// @inheritdoc IJobEscrow
    function isBacker(bytes32 jobId, address provider) external view returns (bool) {
        // Something the provider did: the job's settlement listed it (proven with `provePayout`).
        // A leaf or a lock the orchestrator alone put on chain makes no party to disputes.
        return _payees[jobId][provider] != 0;
    }

    /// @inheritdoc IJobEscrow
    function assignmentOf(bytes32 jobId, address provider, uint256 placement)
        external
        view
        returns (bool proven, uint256 collateral, uint256 committedAt)
    {
        uint256 word = _assignments[jobId][provider][placement];
        return (word != 0, uint96(word), uint40(word >> _FROZEN_SHIFT));
    }

    /// @inheritdoc IJobEscrow
    function assignmentsCommittedAt(bytes32 root) external view returns (uint256) {
        return _assignmentRoots[root];
    }

    /// @inheritdoc IJobEscrow
    function payeeOf(bytes32 jobId, address provider) external view returns (bool proven, uint256 paid, uint256 frozen) {
        uint256 word = _payees[jobId][provider];
        return (word != 0, uint96(word), uint96(word >> _FROZEN_SHIFT));
    }

    /// @inheritdoc IJobEscrow
    function payoutListCommitted(bytes32 digest) external view returns (bool) {
        return _payoutLists[digest];
    }

    // ------------------------------------------------------------------ internal

    function _checkRange(uint256 value, uint256 min, uint256 max) private pure {
        if (value < min || value > max) revert JobEscrowParameterOutOfRange(value, min, max);
    }

    /// @dev Records a settlement's (job, provider, payout, resultRoot) list by its digest, which
    /// `provePayout` checks: what each job paid each payee, for one write per settlement.
    function _commitPayouts(bytes32 digest) private {
        _payoutLists[digest] = true;
        emit PayoutsCommitted(digest);
    }

    /// @dev `window`, effective from the next second: a job created or settled in this second
    /// keeps the value it was created or settled under.
    function _pushParameter(Checkpoints.Trace208 storage trace, uint256 window) private {
        // slither-disable-next-line unused-return
        trace.push((block.timestamp + 1).toUint48(), uint208(window));
    }

    /// @dev The dispute window a job settled at `settledAt` was settled under.
    function _disputeWindowAt(uint256 settledAt) private view returns (uint256) {
        return _disputeWindows.upperLookupRecent(settledAt.toUint48());
    }

    function _newPayoutList(uint256 pairs) private pure returns (PayoutList memory) {
        return PayoutList({pairs: new SoloSettlement[](pairs), count: 0});
    }

    /// @dev Settles one job exactly once and appends its (job, provider, payout) pairs to `list`;
    /// the caller hands them to the StakeManager in one call, which releases the collateral and
    /// credits the payouts. The sum of the payouts is checked against the escrow here, before that
    /// call, so nothing is credited for a settlement that overpays. The caller emits the event.
    /// @return refund What the customer gets back.
    function _settle(
        bytes32 jobId,
        address[] calldata providers,
        uint256[] calldata payouts,
        bytes32 resultRoot,
        PayoutList memory list
    ) private returns (uint256 refund) {
        if (providers.length != payouts.length) revert JobEscrowLengthMismatch(providers.length, payouts.length);
        // slither-disable-next-line uninitialized-local
        uint256 paid;
        uint256 k = list.count;
        for (uint256 i; i < providers.length; ++i) {
            uint256 payout = payouts[i];
            paid += payout;
            list.pairs[k] = SoloSettlement({jobId: jobId, provider: providers[i], payout: payout, resultRoot: resultRoot});
            ++k;
        }
        list.count = k;
        refund = _closeJob(jobId, paid);
    }

    /// @dev Marks funded job `jobId` settled exactly once, until its deadline + grace, paying
    /// `paid` out of its escrow (the caller credits the providers), and keeps the rest as the
    /// customer's refund. Hot path: the packed head is read and written as one word, without a
    /// memory JobHead; a funded job's head holds when its settlement closes, so that costs no read.
    /// @return refund What the customer gets back.
    function _closeJob(bytes32 jobId, uint256 paid) private returns (uint256 refund) {
        JobRecord storage job = _jobs[jobId];
        uint256 head = job.head;
        if (head >> _STATUS_SHIFT != uint256(JobStatus.Funded)) {
            JobStatus status = JobStatus(uint8(head >> _STATUS_SHIFT));
            if (status == JobStatus.Settled) revert JobEscrowAlreadySettled(jobId);
            revert JobEscrowJobNotFunded(jobId, status);
        }
        uint256 closedAt = uint40(head >> _SETTLED_AT_SHIFT);
        if (block.timestamp > closedAt) revert JobEscrowSettlementClosed(jobId, closedAt);
        uint256 amount = uint96(head);
        if (paid > amount) revert JobEscrowPayoutExceedsEscrow(jobId, paid, amount);
        unchecked {
            refund = amount - paid; // paid <= amount, checked above
        }
        job.head = amount | (refund << _REFUND_SHIFT) | (block.timestamp << _SETTLED_AT_SHIFT)
            | (uint256(JobStatus.Settled) << _STATUS_SHIFT);
    }

    function _packHead(JobHead memory h) private pure returns (uint256) {
        return uint256(h.amount) | (uint256(h.refund) << _REFUND_SHIFT) | (uint256(h.time) << _SETTLED_AT_SHIFT)
            | (uint256(h.status) << _STATUS_SHIFT);
    }

    function _unpackHead(uint256 packed) private pure returns (JobHead memory) {
        return JobHead({
            amount: uint96(packed),
            refund: uint96(packed >> _REFUND_SHIFT),
            time: uint40(packed >> _SETTLED_AT_SHIFT),
            status: JobStatus(uint8(packed >> _STATUS_SHIFT))
        });
    }
}
