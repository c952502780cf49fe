// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControlDefaultAdminRules} from
    "@openzeppelin/contracts/access/extensions/AccessControlDefaultAdminRules.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {Math} from "@openzeppelin/contracts/utils/math/Math.sol";
import {Checkpoints} from "@openzeppelin/contracts/utils/structs/Checkpoints.sol";

import {IStakeManager} from "./interfaces/IStakeManager.sol";
import {IJobEscrow} from "./interfaces/IJobEscrow.sol";

/// @title StakeManager
/// @notice Provider stake of DePIN Mesh. See {IStakeManager}.
/// @dev Slashing order for stake not tied to a job: free bonded stake first, then the unbonding
/// locks (from the last open lock backwards, each lowered by what it loses), so a lock never pays
/// more than what is left of it. Locked collateral is only ever slashed per job, by
/// {slashCollateral}, until the job's collateral slash window closes.
/// Collateral has two forms. A job lock ({lockCollateral}) pins stake to one job. A standing
/// reservation ({reserveCollateral}) pins stake to a provider until a time, and backs every job
/// assigned to it in an assignment root committed on the escrow (`IJobEscrow.commitAssignments`):
/// no storage per job, so the orchestrator's per-job cost is a share of one root. A reservation
/// never shrinks or shortens while live, lapses by itself, and is slashable only for a proven
/// assignment (`IJobEscrow.proveAssignment`) whose job's collateral slash window is open.
/// Gas layout for settlement: a provider's locked collateral, pending payout and the payout's
/// release time share one slot (`_ledgers`), so settling a job releases the collateral and credits
/// the payout with one storage write per provider; claimable payouts sit beside `bonded`. An older
/// pending payout that is still maturing when a payout with a later release time arrives moves to
/// a second slot (`_maturing`), at most once per payout period and provider.
contract StakeManager is IStakeManager, AccessControlDefaultAdminRules, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;
    using SafeCast for uint256;
    using Checkpoints for Checkpoints.Trace208;

    /// @inheritdoc IStakeManager
    bytes32 public constant ORCHESTRATOR_ROLE = keccak256("ORCHESTRATOR_ROLE");
    /// @inheritdoc IStakeManager
    bytes32 public constant SLASHER_ROLE = keccak256("SLASHER_ROLE");
    /// @inheritdoc IStakeManager
    bytes32 public constant ESCROW_ROLE = keccak256("ESCROW_ROLE");
    /// @inheritdoc IStakeManager
    bytes32 public constant DISPUTES_ROLE = keccak256("DISPUTES_ROLE");
    /// @inheritdoc IStakeManager
    uint256 public constant MAX_UNBONDING_LOCKS = 16;
    /// @inheritdoc IStakeManager
    uint256 public constant MAX_PERIOD = 365 days;

    uint256 private constant BPS = 10_000;
    /// @dev Delay of a two-step transfer of DEFAULT_ADMIN_ROLE (AccessControlDefaultAdminRules).
    uint48 private constant ADMIN_TRANSFER_DELAY = 2 days;

    /// @dev One account's stake and claimable payout, two slots; its locked collateral and pending
    /// payout are in `_ledgers`.
    struct Provider {
        uint128 bonded; // stake that backs work, including the locked collateral
        uint128 claimable; // payout the escrow pays on `claim`
        uint128 unbonding; // sum of the open unbonding locks' amounts
        uint64 nextLockId; // id of the next unbonding lock
        Tier tier; // current tier
    }

    /// @dev An epoch's committed score root and when it was committed (proofs expire).
    struct EpochRecord {
        bytes32 root;
        uint40 committedAt;
    }

    // Bit layout of a packed ledger word: locked (uint96) | pending (uint104) | releaseAt (uint40).
    // `_maturing` words use the same layout with locked = 0.
    uint256 private constant _PENDING_SHIFT = 96;
    uint256 private constant _RELEASE_AT_SHIFT = 200;
    // A reservation word: amount (uint96) | until (uint40) << _UNTIL_SHIFT | since (uint40) <<
    // _SINCE_SHIFT, since = when this run of live reservation began (raises and extensions of a
    // live one keep it; one made after a lapse starts a new run).
    uint256 private constant _UNTIL_SHIFT = 96;
    uint256 private constant _SINCE_SHIFT = 136;
    // Reservation terms: ceiling (uint96) | horizon (uint40) << _UNTIL_SHIFT | this flag (set).
    uint256 private constant _TERMS_SET = 1 << 255;

    IERC20 private immutable _token;

    mapping(address provider => Provider) private _providers;
    mapping(address account => uint256) private _ledgers; // packed locked | pending | releaseAt
    mapping(address account => uint256) private _maturing; // packed 0 | pending | releaseAt, older bucket
    mapping(address provider => mapping(uint256 lockId => UnbondingLock)) private _unbondingLocks;
    // slither-disable-next-line uninitialized-state
    mapping(address provider => uint64[]) private _openLockIds;
    mapping(bytes32 jobId => mapping(address provider => uint256)) private _lockedFor;
    mapping(address provider => uint256) private _reservations; // packed amount | until
    mapping(address provider => uint256) private _terms; // packed ceiling | horizon | _TERMS_SET
    mapping(bytes32 jobId => mapping(address provider => mapping(uint256 placement => uint256))) private
        _assignmentSlashed;
    mapping(uint64 epoch => EpochRecord) private _epochs;
    mapping(address provider => mapping(uint64 epoch => bool)) private _scoreSlashed;
    mapping(address provider => Checkpoints.Trace208) private _stakeHistory; // bonded + unbonding
    mapping(bytes32 commitment => uint256 blockNumber) private _findings;
    mapping(uint256 slashId => Slash) private _slashes;
    uint256 private _slashCount;

    uint64 private _unbondingPeriod;
    uint64 private _slashDisputeWindow;
    uint64 private _scoreProofWindow;
    uint16 private _scoreThresholdBps;
    uint16 private _scoreSlashBps;
    uint16 private _finderBps;
    address private _treasury;
    address private _jobEscrow;

    /// @dev The payout books decide what the JobEscrow pays out, so only that contract may
    /// change them; an ESCROW_ROLE granted to anyone else does not reach them.
    modifier onlyJobEscrow() {
        if (msg.sender != _jobEscrow) revert StakeManagerNotJobEscrow(msg.sender);
        _;
    }

    /// @notice Deploy first (after the token). Then deploy JobEscrow and call {setJobEscrow}.
    /// @param token_ The stake and payment ERC-20.
    /// @param admin Receives DEFAULT_ADMIN_ROLE (transferred in two steps, with a 2-day delay).
    /// @param treasury_ Receives slash proceeds without an injured customer.
    /// @param unbondingPeriod_ Seconds between {requestUnbond} and {withdraw}, at most MAX_PERIOD.
    /// @param slashDisputeWindow_ Seconds a slash stays disputable, at most MAX_PERIOD.
    constructor(IERC20 token_, address admin, address treasury_, uint64 unbondingPeriod_, uint64 slashDisputeWindow_)
        AccessControlDefaultAdminRules(ADMIN_TRANSFER_DELAY, admin)
    {
        if (address(token_) == address(0)) revert StakeManagerZeroAddress("token");
        if (treasury_ == address(0)) revert StakeManagerZeroAddress("treasury");
        _checkRange(unbondingPeriod_, 0, MAX_PERIOD);
        _checkRange(slashDisputeWindow_, 0, MAX_PERIOD);
        _token = token_;
        _treasury = treasury_;
        _unbondingPeriod = unbondingPeriod_;
        _slashDisputeWindow = slashDisputeWindow_;
        _scoreProofWindow = 1 days;
        _scoreThresholdBps = 5_000;
        _scoreSlashBps = 1_000;
        _finderBps = 1_000;
        emit TreasurySet(treasury_);
        emit UnbondingPeriodSet(unbondingPeriod_);
        emit SlashDisputeWindowSet(slashDisputeWindow_);
        emit ScoreProofWindowSet(1 days);
        emit ScoreSlashingSet(5_000, 1_000, 1_000);
    }

    // ------------------------------------------------------------------ provider

    /// @inheritdoc IStakeManager
    function stake(uint256 amount) external nonReentrant {
        if (amount == 0) revert StakeManagerZeroAmount(msg.sender);
        Provider storage p = _providers[msg.sender];
        p.bonded += amount.toUint128();
        _checkpoint(msg.sender);
        emit Staked(msg.sender, amount);
        _pullExact(msg.sender, amount);
    }

    /// @inheritdoc IStakeManager
    function requestUnbond(uint256 amount) external returns (uint256 lockId) {
        if (amount == 0) revert StakeManagerZeroAmount(msg.sender);
        Provider storage p = _providers[msg.sender];
        uint256 free = p.bonded - _lockedOf(msg.sender);
        if (amount > free) revert StakeManagerInsufficientFreeStake(msg.sender, amount, free);
        uint64[] storage open = _openLockIds[msg.sender];
        if (open.length >= MAX_UNBONDING_LOCKS) revert StakeManagerTooManyUnbondingLocks(msg.sender, MAX_UNBONDING_LOCKS);
        lockId = p.nextLockId;
        uint64 withdrawableAt = (block.timestamp + _unbondingPeriod).toUint64();
        p.bonded -= uint128(amount); // amount <= free <= bonded
        p.unbonding += uint128(amount);
        p.nextLockId = (lockId + 1).toUint64();
        open.push(uint64(lockId));
        _unbondingLocks[msg.sender][lockId] = UnbondingLock({amount: uint128(amount), withdrawableAt: withdrawableAt});
        emit UnbondRequested(msg.sender, lockId, amount, withdrawableAt);
    }

    /// @inheritdoc IStakeManager
    function withdraw(uint256 lockId) external nonReentrant {
        UnbondingLock memory lock = _openLock(msg.sender, lockId);
        if (block.timestamp < lock.withdrawableAt) revert StakeManagerUnbondingNotEnded(lockId, lock.withdrawableAt);
        uint256 amount = _closeLock(msg.sender, lockId, lock);
        _checkpoint(msg.sender);
        emit Withdrawn(msg.sender, lockId, amount);
        _token.safeTransfer(msg.sender, amount);
    }

    /// @inheritdoc IStakeManager
    function cancelUnbond(uint256 lockId) external {
        UnbondingLock memory lock = _openLock(msg.sender, lockId);
        uint256 amount = _closeLock(msg.sender, lockId, lock);
        _providers[msg.sender].bonded += uint128(amount);
        emit UnbondCancelled(msg.sender, lockId, amount);
    }

    /// @inheritdoc IStakeManager
    function setReservationTerms(uint256 ceiling, uint256 horizon) external {
        _checkRange(ceiling, 0, type(uint96).max);
        _checkRange(horizon, 0, MAX_PERIOD);
        _terms[msg.sender] = _TERMS_SET | ceiling | (horizon << _UNTIL_SHIFT);
        emit ReservationTermsSet(msg.sender, ceiling, horizon);
    }

    // ------------------------------------------------------------------ escrow role

    /// @inheritdoc IStakeManager
    function lockCollateral(bytes32 jobId, address[] calldata providers, uint256[] calldata amounts)
        external
        onlyRole(ESCROW_ROLE)
    {
        if (providers.length != amounts.length) revert StakeManagerLengthMismatch(providers.length, amounts.length);
        for (uint256 i; i < providers.length; ++i) {
            address provider = providers[i];
            uint256 amount = amounts[i];
            if (amount == 0) revert StakeManagerZeroAmount(provider);
            uint256 ledger = _ledgers[provider];
            uint256 locked = uint96(ledger);
            uint256 free = _providers[provider].bonded - locked - _liveReserved(provider);
            if (amount > free) revert StakeManagerInsufficientFreeStake(provider, amount, free);
            _ledgers[provider] = (ledger - locked) | _fitLocked(locked + amount);
            _lockedFor[jobId][provider] += amount;
            emit CollateralLocked(jobId, provider, amount);
        }
    }

    /// @inheritdoc IStakeManager
    function releaseCollateral(bytes32[] calldata jobIds, address[] calldata providers)
        external
        onlyRole(ESCROW_ROLE)
    {
        if (jobIds.length != providers.length) revert StakeManagerLengthMismatch(jobIds.length, providers.length);
        for (uint256 i; i < jobIds.length; ++i) {
            address provider = providers[i];
            mapping(address => uint256) storage jobLocks = _lockedFor[jobIds[i]];
            uint256 amount = jobLocks[provider];
            if (amount == 0) continue;
            jobLocks[provider] = 0;
            // Cannot underflow: the locked field is the sum of this provider's job locks.
            unchecked {
                _ledgers[provider] -= amount;
            }
            emit CollateralReleased(jobIds[i], provider, amount);
        }
    }

    /// @inheritdoc IStakeManager
    function settleCollateral(IJobEscrow.SoloSettlement[] calldata pairs, uint256 releaseAt)
        external
        onlyJobEscrow
    {
        uint256 releaseBits = uint256(releaseAt.toUint40()) << _RELEASE_AT_SHIFT;
        for (uint256 i; i < pairs.length; ++i) {
            bytes32 jobId;
            address provider;
            uint256 payout;
            uint256 ledger;
            uint256 ledgerSlot;
            // Hot path, in assembly: pair `i` is read straight from calldata (4 words: jobId,
            // provider, payout, resultRoot; `i` < length, and a dirty address reverts with
            // StakeManagerInvalidAddress), and `_ledgers[provider]`'s slot is hashed once, by
            // Solidity's mapping layout, and read and written through it. Settlement touches no
            // collateral: a job lock stays slashable until the job's collateral slash window
            // closes, paid or not, as a reservation's placement does (`releaseCollateral` after).
            assembly ("memory-safe") {
                let pair := add(pairs.offset, shl(7, i))
                jobId := calldataload(pair)
                provider := calldataload(add(pair, 0x20))
                if shr(160, provider) {
                    mstore(0x00, 0x6f39895200000000000000000000000000000000000000000000000000000000) // StakeManagerInvalidAddress(uint256)
                    mstore(0x04, provider)
                    revert(0x00, 0x24)
                }
                payout := calldataload(add(pair, 0x40))
                mstore(0x00, provider)
                mstore(0x20, _ledgers.slot)
                ledgerSlot := keccak256(0x00, 0x40)
                ledger := sload(ledgerSlot)
            }
            if (payout != 0) {
                uint256 pending = uint104(ledger >> _PENDING_SHIFT);
                uint256 dueBits = releaseBits;
                if (pending != 0 && ledger >> _RELEASE_AT_SHIFT != releaseAt) {
                    // Rare (once per payout period and provider): the pending payout has another
                    // release time, which it keeps.
                    (pending, dueBits) = _creditElsewhere(provider, pending, ledger >> _RELEASE_AT_SHIFT, payout, releaseAt);
                } else {
                    // Cannot overflow: pending < 2**104 and the escrow caps a payout at a job's uint96 amount.
                    unchecked {
                        pending += payout;
                    }
                }
                if (pending > type(uint104).max) revert StakeManagerAmountTooLarge(pending, type(uint104).max);
                ledger = uint96(ledger) | (pending << _PENDING_SHIFT) | dueBits;
            }
            assembly ("memory-safe") {
                sstore(ledgerSlot, ledger)
            }
        }
    }

    /// @inheritdoc IStakeManager
    function takeClaimable(address account) external onlyJobEscrow returns (uint256 amount) {
        _mature(account);
        Provider storage p = _providers[account];
        amount = p.claimable;
        p.claimable = 0;
    }

    /// @inheritdoc IStakeManager
    function freezePending(address account, uint256 amount, uint256 releaseAt) external onlyJobEscrow {
        uint256 ledger = _mature(account);
        // Only the bucket the disputed job's payout went to (the one due at `releaseAt`), so the
        // freeze holds that job's payout, never another release time's.
        if (ledger >> _RELEASE_AT_SHIFT == releaseAt) {
            uint256 hot = uint104(ledger >> _PENDING_SHIFT);
            if (amount > hot) revert StakeManagerInsufficientPending(account, amount, hot);
            _ledgers[account] = ledger - (amount << _PENDING_SHIFT);
        } else {
            uint256 older = _maturing[account];
            uint256 inOlder = older >> _RELEASE_AT_SHIFT == releaseAt ? uint104(older >> _PENDING_SHIFT) : 0;
            if (amount > inOlder) revert StakeManagerInsufficientPending(account, amount, inOlder);
            _maturing[account] = older - (amount << _PENDING_SHIFT);
        }
    }

    /// @inheritdoc IStakeManager
    function creditPayout(address account, uint256 amount, uint256 releaseAt) external onlyJobEscrow {
        emit PayoutCredited(account, amount, releaseAt);
        if (amount == 0) return;
        if (releaseAt <= block.timestamp) {
            _addClaimable(account, amount);
            return;
        }
        uint256 ledger = _ledgers[account];
        uint256 pending = uint104(ledger >> _PENDING_SHIFT);
        uint256 dueBits = uint256(releaseAt.toUint40()) << _RELEASE_AT_SHIFT;
        if (pending != 0 && ledger >> _RELEASE_AT_SHIFT != releaseAt) {
            (pending, dueBits) = _creditElsewhere(account, pending, ledger >> _RELEASE_AT_SHIFT, amount, releaseAt);
        } else {
            pending += amount;
        }
        if (pending > type(uint104).max) revert StakeManagerAmountTooLarge(pending, type(uint104).max);
        _ledgers[account] = uint96(ledger) | (pending << _PENDING_SHIFT) | dueBits;
    }

    // ------------------------------------------------------------------ orchestrator role

    /// @inheritdoc IStakeManager
    function setTier(address provider, Tier tier) external onlyRole(ORCHESTRATOR_ROLE) {
        _setTier(provider, tier);
    }

    /// @inheritdoc IStakeManager
    function commitEpoch(uint64 epoch, bytes32 scoreRoot) external onlyRole(ORCHESTRATOR_ROLE) {
        if (scoreRoot == bytes32(0)) revert StakeManagerZeroRoot(epoch);
        if (_epochs[epoch].root != bytes32(0)) revert StakeManagerEpochAlreadyCommitted(epoch);
        _epochs[epoch] = EpochRecord({root: scoreRoot, committedAt: block.timestamp.toUint40()});
        emit EpochCommitted(epoch, scoreRoot);
    }

    /// @inheritdoc IStakeManager
    function reserveCollateral(address[] calldata providers, uint256[] calldata amounts, uint64 until)
        external
        onlyRole(ORCHESTRATOR_ROLE)
    {
        if (providers.length != amounts.length) revert StakeManagerLengthMismatch(providers.length, amounts.length);
        _checkRange(until, block.timestamp + 1, block.timestamp + MAX_PERIOD);
        for (uint256 i; i < providers.length; ++i) {
            address provider = providers[i];
            uint256 amount = amounts[i];
            uint256 lapsesAt = until;
            uint256 word = _reservations[provider];
            uint256 reservedUntil = uint40(word >> _UNTIL_SHIFT);
            uint256 since = block.timestamp;
            if (reservedUntil > block.timestamp) {
                // A live reservation is raised to at least the request, never lowered or
                // shortened: requests commute, so replicas may send them in any order. It keeps
                // its start, so it goes on backing the placements committed while it was live.
                amount = Math.max(amount, uint96(word));
                lapsesAt = Math.max(lapsesAt, reservedUntil);
                since = word >> _SINCE_SHIFT;
            }
            uint256 free = _providers[provider].bonded - uint96(_ledgers[provider]); // less its job locks
            if (amount > free) revert StakeManagerInsufficientFreeStake(provider, amount, free);
            uint256 terms = _terms[provider];
            if (terms != 0) {
                // What the provider allowed: at most its ceiling, lapsing within its horizon. A
                // lowered ceiling stops raises and extensions; the live reservation still lapses
                // only at its `until` (no way out of a pending slash).
                _checkRange(amount, 0, uint96(terms));
                _checkRange(lapsesAt, 0, block.timestamp + uint40(terms >> _UNTIL_SHIFT));
            }
            _reservations[provider] =
                uint256(amount.toUint96()) | (lapsesAt << _UNTIL_SHIFT) | (since << _SINCE_SHIFT);
            emit CollateralReserved(provider, amount, lapsesAt);
        }
    }

    // ------------------------------------------------------------------ slashing

    /// @inheritdoc IStakeManager
    function slash(address provider, uint256 amount, SlashReason reason, bytes32 evidence)
        external
        onlyRole(SLASHER_ROLE)
        returns (uint256 slashId)
    {
        if (amount == 0) revert StakeManagerZeroAmount(provider);
        uint256 taken = _takeUnlockedStake(provider, amount);
        // slither-disable-next-line incorrect-equality
        if (taken == 0) revert StakeManagerNothingToSlash(provider);
        slashId = _recordSlash(provider, bytes32(0), 0, reason, evidence, _treasury, taken, address(0), 0);
    }

    /// @inheritdoc IStakeManager
    function slashCollateral(
        bytes32 jobId,
        address provider,
        uint256 placement,
        uint256 amount,
        SlashReason reason,
        bytes32 evidence
    ) external onlyRole(SLASHER_ROLE) returns (uint256 slashId) {
        if (amount == 0) revert StakeManagerZeroAmount(provider);
        address escrow = _jobEscrow;
        if (escrow == address(0)) revert StakeManagerEscrowNotSet(jobId);
        // slither-disable-next-line uninitialized-local
        uint256 locked; // placement 0: the job lock
        // slither-disable-next-line uninitialized-local
        uint256 left; // of the proven placement
        if (placement == 0) {
            locked = _lockedFor[jobId][provider];
            if (locked == 0) revert StakeManagerNothingToSlash(provider);
        } else {
            (bool proven, uint256 collateral, uint256 committedAt) =
                IJobEscrow(escrow).assignmentOf(jobId, provider, placement);
            // Backed only by the reservation that was live when the placement's root was
            // committed: one made after that one lapsed started later and backs no old leaf.
            if (proven && committedAt >= _reservations[provider] >> _SINCE_SHIFT) {
                left = collateral - _assignmentSlashed[jobId][provider][placement];
            }
            if (left == 0) revert StakeManagerNothingToSlash(provider);
        }
        // Views on the escrow set by the admin: the job's slash window and the customer it protects.
        uint256 closedAt = IJobEscrow(escrow).collateralReleasableAt(jobId);
        if (block.timestamp >= closedAt) revert StakeManagerCollateralSlashWindowClosed(jobId, closedAt);
        uint256 taken;
        if (locked != 0) {
            taken = Math.min(amount, locked);
            _lockedFor[jobId][provider] = locked - taken;
            _ledgers[provider] -= taken; // the locked field holds at least this job's lock
        } else {
            // An assignment is backed by the reservation while it is live: at most what is left of both.
            taken = Math.min(Math.min(amount, left), _liveReserved(provider));
            // slither-disable-next-line incorrect-equality
            if (taken == 0) revert StakeManagerNothingToSlash(provider);
            _assignmentSlashed[jobId][provider][placement] += taken;
            _reservations[provider] -= taken; // the amount field holds at least `taken`
        }
        _providers[provider].bonded -= uint128(taken);
        _checkpoint(provider); // a later score slash sizes on the stake left
        address customer = IJobEscrow(escrow).jobOf(jobId).customer;
        slashId = _recordSlash(provider, jobId, placement, reason, evidence, customer, taken, address(0), 0);
    }

    /// @inheritdoc IStakeManager
    function commitFinding(bytes32 commitment) external {
        if (_findings[commitment] != 0) revert StakeManagerFindingAlreadyCommitted(commitment);
        _findings[commitment] = block.number;
        emit FindingCommitted(msg.sender, commitment);
    }

    /// @inheritdoc IStakeManager
    function slashForScore(
        address provider,
        uint64 epoch,
        uint256 scoreBps,
        bytes32 telemetryDigest,
        bytes32[] calldata proof,
        bytes32 salt
    ) external returns (uint256 slashId) {
        uint256 committedAt = _useFinding(provider, epoch, scoreBps, telemetryDigest, proof, salt);
        _scoreSlashed[provider][epoch] = true;
        slashId = _slashScore(provider, committedAt, telemetryDigest);
    }

    /// @inheritdoc IStakeManager
    function releaseSlash(uint256 slashId) external nonReentrant {
        Slash storage s = _slashes[slashId];
        if (s.status != SlashStatus.Pending) revert StakeManagerSlashNotInStatus(slashId, s.status);
        if (block.timestamp < s.releasableAt) revert StakeManagerSlashStillDisputable(slashId, s.releasableAt);
        s.status = SlashStatus.Released;
        (address beneficiary, uint256 amount, address finder, uint256 finderAmount) =
            (s.beneficiary, s.amount, s.finder, s.finderAmount);
        emit SlashReleased(slashId, beneficiary, amount, finder, finderAmount);
        if (amount != 0) _token.safeTransfer(beneficiary, amount);
        if (finderAmount != 0) _token.safeTransfer(finder, finderAmount);
    }

    /// @inheritdoc IStakeManager
    function freezeSlash(uint256 slashId) external onlyRole(DISPUTES_ROLE) {
        Slash storage s = _slashes[slashId];
        if (s.status != SlashStatus.Pending) revert StakeManagerSlashNotInStatus(slashId, s.status);
        if (block.timestamp >= s.releasableAt) revert StakeManagerSlashWindowClosed(slashId, s.releasableAt);
        s.status = SlashStatus.Frozen;
        emit SlashFrozen(slashId);
    }

    /// @inheritdoc IStakeManager
    function resolveSlash(uint256 slashId, bool reverse) external onlyRole(DISPUTES_ROLE) {
        Slash storage s = _slashes[slashId];
        if (s.status != SlashStatus.Frozen) revert StakeManagerSlashNotInStatus(slashId, s.status);
        if (reverse) {
            s.status = SlashStatus.Reversed;
            address provider = s.provider;
            uint256 amount = uint256(s.amount) + s.finderAmount;
            _providers[provider].bonded += uint128(amount);
            _checkpoint(provider);
            emit SlashReversed(slashId, provider, amount);
            // A reversed score slash undoes its demotion, unless the tier was set since.
            // slither-disable-next-line incorrect-equality
            if (s.reason == SlashReason.LowScore && _providers[provider].tier == Tier.Background) {
                _setTier(provider, s.priorTier);
            }
        } else {
            s.status = SlashStatus.Pending;
            emit SlashUpheld(slashId);
        }
    }

    // ------------------------------------------------------------------ admin

    /// @inheritdoc IStakeManager
    function setUnbondingPeriod(uint64 period) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _checkRange(period, 0, MAX_PERIOD);
        _unbondingPeriod = period;
        emit UnbondingPeriodSet(period);
    }

    /// @inheritdoc IStakeManager
    function setSlashDisputeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _checkRange(window, 0, MAX_PERIOD);
        _slashDisputeWindow = window;
        emit SlashDisputeWindowSet(window);
    }

    /// @inheritdoc IStakeManager
    function setScoreProofWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _checkRange(window, 1, MAX_PERIOD);
        _scoreProofWindow = window;
        emit ScoreProofWindowSet(window);
    }

    /// @inheritdoc IStakeManager
    function setScoreSlashing(uint16 thresholdBps, uint16 slashBps, uint16 finderBps)
        external
        onlyRole(DEFAULT_ADMIN_ROLE)
    {
        if (thresholdBps > BPS) revert StakeManagerInvalidBps(thresholdBps);
        if (slashBps > BPS) revert StakeManagerInvalidBps(slashBps);
        if (finderBps > BPS) revert StakeManagerInvalidBps(finderBps);
        (_scoreThresholdBps, _scoreSlashBps, _finderBps) = (thresholdBps, slashBps, finderBps);
        emit ScoreSlashingSet(thresholdBps, slashBps, finderBps);
    }

    /// @inheritdoc IStakeManager
    function setTreasury(address treasury_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (treasury_ == address(0)) revert StakeManagerZeroAddress("treasury");
        _treasury = treasury_;
        emit TreasurySet(treasury_);
    }

    /// @inheritdoc IStakeManager
    function setJobEscrow(address escrow) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (escrow == address(0)) revert StakeManagerZeroAddress("escrow");
        if (_jobEscrow != address(0)) revert StakeManagerEscrowAlreadySet(_jobEscrow);
        if (IJobEscrow(escrow).token() != address(_token) || IJobEscrow(escrow).stakeManager() != address(this)) {
            revert StakeManagerEscrowMismatch(escrow);
        }
        _jobEscrow = escrow;
        _grantRole(ESCROW_ROLE, escrow);
        emit JobEscrowSet(escrow);
    }

    // ------------------------------------------------------------------ views

    /// @inheritdoc IStakeManager
    function token() external view returns (address) {
        return address(_token);
    }

    /// @inheritdoc IStakeManager
    function stakeOf(address provider) external view returns (StakeInfo memory) {
        Provider storage p = _providers[provider];
        return StakeInfo({bonded: p.bonded, locked: _lockedOf(provider), unbonding: p.unbonding, tier: p.tier});
    }

    /// @inheritdoc IStakeManager
    function payoutOf(address account) external view returns (Payout memory payout) {
        payout.claimable = _providers[account].claimable;
        uint256[2] memory buckets = [_ledgers[account], _maturing[account]];
        for (uint256 i; i < 2; ++i) {
            uint256 amount = uint104(buckets[i] >> _PENDING_SHIFT);
            uint256 due = buckets[i] >> _RELEASE_AT_SHIFT;
            if (amount == 0) continue;
            if (due <= block.timestamp) {
                payout.claimable += amount;
            } else {
                payout.pending += amount;
                payout.releaseAt = Math.max(payout.releaseAt, due);
            }
        }
    }

    /// @inheritdoc IStakeManager
    function unbondingLock(address provider, uint256 lockId) external view returns (UnbondingLock memory) {
        return _unbondingLocks[provider][lockId];
    }

    /// @inheritdoc IStakeManager
    function openLocks(address provider) external view returns (uint64[] memory) {
        return _openLockIds[provider];
    }

    /// @inheritdoc IStakeManager
    function lockedFor(bytes32 jobId, address provider) external view returns (uint256) {
        return _lockedFor[jobId][provider];
    }

    /// @inheritdoc IStakeManager
    function reservationOf(address provider) external view returns (uint256 amount, uint256 until) {
        return (_liveReserved(provider), uint40(_reservations[provider] >> _UNTIL_SHIFT));
    }

    /// @inheritdoc IStakeManager
    function reservationTermsOf(address provider) external view returns (bool set, uint256 ceiling, uint256 horizon) {
        uint256 terms = _terms[provider];
        return (terms != 0, uint96(terms), uint40(terms >> _UNTIL_SHIFT));
    }

    /// @inheritdoc IStakeManager
    function assignmentSlashed(bytes32 jobId, address provider, uint256 placement) external view returns (uint256) {
        return _assignmentSlashed[jobId][provider][placement];
    }

    /// @inheritdoc IStakeManager
    function epochRoot(uint64 epoch) external view returns (bytes32) {
        return _epochs[epoch].root;
    }

    /// @inheritdoc IStakeManager
    function epochCommittedAt(uint64 epoch) external view returns (uint256) {
        return _epochs[epoch].committedAt;
    }

    /// @inheritdoc IStakeManager
    function stakeAt(address provider, uint256 at) external view returns (uint256) {
        return _stakeHistory[provider].upperLookupRecent(at.toUint48());
    }

    /// @inheritdoc IStakeManager
    function findingCommittedAt(bytes32 commitment) external view returns (uint256) {
        return _findings[commitment];
    }

    /// @inheritdoc IStakeManager
    function scoreSlashed(address provider, uint64 epoch) external view returns (bool) {
        return _scoreSlashed[provider][epoch];
    }

    /// @inheritdoc IStakeManager
    function slashOf(uint256 slashId) external view returns (Slash memory) {
        return _slashes[slashId];
    }

    /// @inheritdoc IStakeManager
    function slashCount() external view returns (uint256) {
        return _slashCount;
    }

    /// @inheritdoc IStakeManager
    function unbondingPeriod() external view returns (uint64) {
        return _unbondingPeriod;
    }

    /// @inheritdoc IStakeManager
    function slashDisputeWindow() external view returns (uint64) {
        return _slashDisputeWindow;
    }

    /// @inheritdoc IStakeManager
    function scoreProofWindow() external view returns (uint64) {
        return _scoreProofWindow;
    }

    /// @inheritdoc IStakeManager
    function scoreSlashing() external view returns (uint16 thresholdBps, uint16 slashBps, uint16 finderBps) {
        return (_scoreThresholdBps, _scoreSlashBps, _finderBps);
    }

    /// @inheritdoc IStakeManager
    function treasury() external view returns (address) {
        return _treasury;
    }

    /// @inheritdoc IStakeManager
    function jobEscrow() external view returns (address) {
        return _jobEscrow;
    }

    // ------------------------------------------------------------------ internal

    /// @dev Pulls exactly `amount` from `from`; a token that delivers less (fee on transfer) is refused.
    function _pullExact(address from, uint256 amount) private {
        uint256 before = _token.balanceOf(address(this));
        _token.safeTransferFrom(from, address(this), amount);
        uint256 received = _token.balanceOf(address(this)) - before;
        if (received != amount) revert StakeManagerFeeOnTransferToken(amount, received);
    }

    /// @dev Checks a score finding (not self-found, fresh, committed by the caller in an earlier
    /// block, first for this provider and epoch, proven, under the threshold) and uses up its
    /// commitment. Returns when the epoch was committed.
    function _useFinding(
        address provider,
        uint64 epoch,
        uint256 scoreBps,
        bytes32 telemetryDigest,
        bytes32[] calldata proof,
        bytes32 salt
    ) private returns (uint256 committedAt) {
        if (msg.sender == provider) revert StakeManagerSelfFinding(provider);
        EpochRecord memory record = _epochs[epoch];
        // slither-disable-next-line incorrect-equality
        if (record.root == bytes32(0)) revert StakeManagerEpochNotCommitted(epoch);
        committedAt = record.committedAt;
        uint256 expiredAt = committedAt + _scoreProofWindow;
        if (block.timestamp > expiredAt) revert StakeManagerScoreProofExpired(epoch, expiredAt);
        bytes32 commitment = keccak256(abi.encode(msg.sender, provider, epoch, scoreBps, telemetryDigest, salt));
        uint256 committedIn = _findings[commitment];
        // slither-disable-next-line incorrect-equality
        if (committedIn == 0 || committedIn >= block.number) revert StakeManagerFindingNotCommitted(commitment);
        if (_scoreSlashed[provider][epoch]) revert StakeManagerAlreadySlashedForEpoch(provider, epoch);
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(provider, scoreBps, telemetryDigest))));
        if (!MerkleProof.verify(proof, record.root, leaf)) revert StakeManagerInvalidScoreProof(provider, epoch);
        if (scoreBps >= _scoreThresholdBps) revert StakeManagerScoreAboveThreshold(scoreBps, _scoreThresholdBps);
        delete _findings[commitment];
    }

    /// @dev Slashes the score share of the stake `provider` held at `committedAt` (capped by what is
    /// slashable now), the finder's share to the caller, and demotes it to Background.
    function _slashScore(address provider, uint256 committedAt, bytes32 telemetryDigest)
        private
        returns (uint256 slashId)
    {
        Provider storage p = _providers[provider];
        // The commitment covers the stake the provider held when the epoch was committed, not
        // stake added since (a finder cannot wait for the provider to add stake).
        uint256 covered = Math.min(
            uint256(p.bonded) + p.unbonding, _stakeHistory[provider].upperLookupRecent(uint48(committedAt))
        );
        uint256 share = covered * _scoreSlashBps / BPS;
        Tier priorTier = p.tier;
        // slither-disable-next-line incorrect-equality
        uint256 taken = share == 0 ? 0 : _takeUnlockedStake(provider, share);
        _setTier(provider, Tier.Background);
        if (taken != 0) {
            uint256 finderAmount = taken * _finderBps / BPS;
            slashId = _recordSlash(
                provider, bytes32(0), 0, SlashReason.LowScore, telemetryDigest, _treasury, taken - finderAmount,
                msg.sender, finderAmount
            );
            _slashes[slashId].priorTier = priorTier;
        }
    }

    function _checkRange(uint256 value, uint256 min, uint256 max) private pure {
        if (value < min || value > max) revert StakeManagerParameterOutOfRange(value, min, max);
    }

    /// @dev Records `provider`'s bonded + unbonding stake now, for sizing score slashes.
    function _checkpoint(address provider) private {
        Provider storage p = _providers[provider];
        // slither-disable-next-line unused-return
        _stakeHistory[provider].push(block.timestamp.toUint48(), (uint256(p.bonded) + p.unbonding).toUint208());
    }

    function _openLock(address provider, uint256 lockId) private view returns (UnbondingLock memory lock) {
        lock = _unbondingLocks[provider][lockId];
        if (lock.amount == 0) revert StakeManagerUnknownUnbondingLock(provider, lockId);
    }

    /// @dev Deletes the lock and takes its amount out of the unbonding stake.
    function _closeLock(address provider, uint256 lockId, UnbondingLock memory lock) private returns (uint256 amount) {
        amount = lock.amount;
        _providers[provider].unbonding -= uint128(amount);
        delete _unbondingLocks[provider][lockId];
        uint64[] storage open = _openLockIds[provider];
        for (uint256 i; i < open.length; ++i) {
            if (open[i] == lockId) return _dropOpen(open, i, amount);
        }
    }

    /// @dev Removes `open[i]` (the last one takes its place); returns `amount`.
    function _dropOpen(uint64[] storage open, uint256 i, uint256 amount) private returns (uint256) {
        open[i] = open[open.length - 1];
        open.pop();
        return amount;
    }

    /// @dev Takes up to `amount` from free bonded stake, then from the unbonding locks (the last
    /// open lock first, each lowered by what it loses); never from locked collateral. Returns what
    /// was taken.
    function _takeUnlockedStake(address provider, uint256 amount) private returns (uint256 taken) {
        Provider storage p = _providers[provider];
        uint256 fromBonded = Math.min(amount, p.bonded - _lockedOf(provider));
        p.bonded -= uint128(fromBonded);
        taken = fromBonded;
        uint64[] storage open = _openLockIds[provider];
        for (uint256 i = open.length; i > 0 && taken < amount; --i) {
            uint256 lockId = open[i - 1];
            UnbondingLock storage lock = _unbondingLocks[provider][lockId];
            uint256 cut = Math.min(amount - taken, lock.amount);
            lock.amount -= uint128(cut);
            taken += cut;
            emit UnbondingLockSlashed(provider, lockId, cut);
            // slither-disable-next-line incorrect-equality
            if (lock.amount == 0) {
                delete _unbondingLocks[provider][lockId];
                _dropOpen(open, i - 1, 0);
            }
        }
        p.unbonding -= uint128(taken - fromBonded);
        if (taken != 0) _checkpoint(provider);
    }

    function _recordSlash(
        address provider,
        bytes32 jobId,
        uint256 placement,
        SlashReason reason,
        bytes32 evidence,
        address beneficiary,
        uint256 amount,
        address finder,
        uint256 finderAmount
    ) private returns (uint256 slashId) {
        slashId = ++_slashCount;
        uint40 releasableAt = (block.timestamp + _slashDisputeWindow).toUint40();
        _slashes[slashId] = Slash({
            provider: provider,
            releasableAt: releasableAt,
            status: SlashStatus.Pending,
            reason: reason,
            priorTier: _providers[provider].tier,
            beneficiary: beneficiary,
            amount: amount.toUint96(),
            finder: finder,
            finderAmount: finderAmount.toUint96(),
            evidence: evidence
        });
        emit Slashed(
            slashId, provider, jobId, placement, reason, evidence, beneficiary, amount, finder, finderAmount, releasableAt
        );
    }

    /// @dev Stake that may not leave: the job locks plus the live reservation.
    function _lockedOf(address provider) private view returns (uint256) {
        return uint96(_ledgers[provider]) + _liveReserved(provider);
    }

    /// @dev `provider`'s reservation while it is live; a lapsed one locks nothing.
    function _liveReserved(address provider) private view returns (uint256) {
        uint256 word = _reservations[provider];
        return uint40(word >> _UNTIL_SHIFT) > block.timestamp ? uint96(word) : 0;
    }

    /// @dev `locked` as the ledger's low field; reverts if it does not fit.
    function _fitLocked(uint256 locked) private pure returns (uint256) {
        if (locked > type(uint96).max) revert StakeManagerAmountTooLarge(locked, type(uint96).max);
        return locked;
    }

    function _addClaimable(address account, uint256 amount) private {
        _providers[account].claimable += amount.toUint128();
        emit PayoutMatured(account, amount);
    }

    /// @dev Credits `amount` due at `releaseAt` to `account`, whose newest bucket holds `hot` due at
    /// `hotDue` (`hotDue` != `releaseAt`), without moving any payout's release time earlier or later:
    /// a bucket past its time becomes claimable, and of two maturing release times the earlier one
    /// goes to the older bucket (`_maturing`). Returns the newest bucket (amount, release bits).
    /// @dev The escrow rounds release times up to whole payout periods and keeps its dispute window
    /// within one period, so at most two release times are ever in the future; the last branch
    /// (a third one) is unreachable and merges into the later bucket rather than revert a settlement.
    function _creditElsewhere(address account, uint256 hot, uint256 hotDue, uint256 amount, uint256 releaseAt)
        private
        returns (uint256 newest, uint256 newestBits)
    {
        if (hotDue <= block.timestamp) {
            _addClaimable(account, hot);
            return (amount, uint256(releaseAt.toUint40()) << _RELEASE_AT_SHIFT);
        }
        if (hotDue < releaseAt) {
            return (amount + _putOlder(account, hot, hotDue), uint256(releaseAt.toUint40()) << _RELEASE_AT_SHIFT);
        }
        return (hot + _putOlder(account, amount, releaseAt), hotDue << _RELEASE_AT_SHIFT);
    }

    /// @dev Puts `amount` due at `due` (in the future) into `account`'s older bucket, after moving
    /// the bucket's matured content to claimable. Returns what did not fit (a third release time;
    /// unreachable, see {_creditElsewhere}), which the caller adds to the newest bucket.
    function _putOlder(address account, uint256 amount, uint256 due) private returns (uint256 left) {
        uint256 older = _maturing[account];
        uint256 olderAmount = uint104(older >> _PENDING_SHIFT);
        uint256 olderDue = older >> _RELEASE_AT_SHIFT;
        if (olderAmount != 0 && olderDue <= block.timestamp) {
            _addClaimable(account, olderAmount);
            olderAmount = 0;
        }
        if (olderAmount != 0 && olderDue != due) return amount;
        olderAmount += amount;
        if (olderAmount > type(uint104).max) revert StakeManagerAmountTooLarge(olderAmount, type(uint104).max);
        _maturing[account] = (olderAmount << _PENDING_SHIFT) | (uint256(due.toUint40()) << _RELEASE_AT_SHIFT);
    }

    /// @dev Moves `account`'s pending buckets past their release time to claimable; returns the
    /// ledger word as stored afterwards.
    function _mature(address account) private returns (uint256 ledger) {
        ledger = _ledgers[account];
        uint256 pending = uint104(ledger >> _PENDING_SHIFT);
        if (pending != 0 && (ledger >> _RELEASE_AT_SHIFT) <= block.timestamp) {
            _addClaimable(account, pending);
            ledger -= pending << _PENDING_SHIFT;
            _ledgers[account] = ledger;
        }
        uint256 older = _maturing[account];
        uint256 olderAmount = uint104(older >> _PENDING_SHIFT);
        if (olderAmount != 0 && (older >> _RELEASE_AT_SHIFT) <= block.timestamp) {
            _addClaimable(account, olderAmount);
            _maturing[account] = 0;
        }
    }

    function _setTier(address provider, Tier tier) private {
        Provider storage p = _providers[provider];
        Tier oldTier = p.tier;
        if (oldTier == tier) return;
        p.tier = tier;
        emit TierChanged(provider, oldTier, tier);
    }
}
