// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {StakeManager} from "../../contracts/StakeManager.sol";
import {JobEscrow} from "../../contracts/JobEscrow.sol";
import {Disputes} from "../../contracts/Disputes.sol";
import {IStakeManager} from "../../contracts/interfaces/IStakeManager.sol";
import {IJobEscrow} from "../../contracts/interfaces/IJobEscrow.sol";
import {IDisputes} from "../../contracts/interfaces/IDisputes.sol";
import {TestToken} from "../../contracts/test/TestToken.sol";
import {Vm} from "./Vm.sol";

/// @notice Drives every external function of the three contracts with bounded random inputs and
/// time travel, and keeps a ghost record of what each rule promises, written from the rules in
/// contracts/README.md, not from the contracts' code: what a lock may pay and when, when a
/// payout must and may be claimable, what a job's disputes may freeze, when collateral may be
/// released and must be slashable. A broken rule is recorded in `violation` (a revert inside a
/// handler call would only be discarded by the fuzzer); the invariant test asserts it is empty.
contract Handler {
    Vm internal constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));
    uint256 internal constant TOKEN = 1e18;
    uint256 internal constant PAYOUT_SLACK = 1 days; // the README's "by t + window + one day"
    bytes32 internal constant ROOT = bytes32(uint256(0x55));

    TestToken public token;
    StakeManager public sm;
    JobEscrow public escrow;
    Disputes public disputes;
    address public admin;
    address public orchestrator;
    address public arbiter;

    address[3] public providers = [address(0x1001), address(0x1002), address(0x1003)];
    address[2] public customers = [address(0x2001), address(0x2002)];
    address public stranger = address(0x3001);
    address public finder = address(0x3002);

    string public violation;
    /// Calls per handler function, and successes of the main ones ("ok:settle", ...): read them
    /// (e.g. from `afterInvariant`) to see what a run reached.
    mapping(bytes32 => uint256) public calls;

    // ---- ghost: stake
    struct GhostLock {
        uint256 id;
        uint256 requested;
        uint256 maturity; // requestedAt + the unbonding period then
        uint256 minTaken; // least any slash must have taken from this lock (see _noteUnbondingSlash)
        bool open;
    }

    mapping(address => GhostLock[]) internal _locks;
    mapping(address => uint256) public staked;
    mapping(address => uint256) public withdrawn;
    mapping(address => uint256) public slashedAway; // taken by slashes, net of reversals

    // ---- ghost: jobs
    struct GhostJob {
        bytes32 id;
        address customer;
        uint256 amount;
        uint256 deadline;
        uint256 settledAt;
        uint8 status; // 1 funded, 2 settled, 3 reclaimed
        uint256 settleCount;
        uint256 frozenNow; // frozen by open disputes about this job
        uint256 frozenFromPayees; // all-time
        uint256 paid; // to providers at settlement
        address payee; // the provider the settlement paid
        uint256 closesAt; // deadline + the grace at creation
        uint256 slashWindow; // the collateral slash window at creation
        uint256 window; // the dispute window at settlement
        uint256 releasableAt; // collateralReleasableAt as of creation, then as of settlement
    }

    GhostJob[] internal _jobs;
    uint256 internal _lastSettled; // index + 1 of the job settled last
    mapping(bytes32 => uint256) internal _jobIndex; // index + 1
    mapping(bytes32 => mapping(address => uint256)) public ghostLocked; // collateral locked, not yet released/slashed

    // ---- ghost: standing reservations and proven assignments
    mapping(address => uint256) public ghostReserved; // as last set (before slashes)
    mapping(address => uint256) public ghostReservedUntil;
    mapping(address => uint256) public ghostReservedSince; // when the live run of reservation began
    mapping(bytes32 => uint256) public ghostRootAt; // when each assignment root was committed
    mapping(bytes32 => mapping(address => mapping(uint256 => uint256))) public ghostAssignedAt; // latest root's
    // proven collateral and what was slashed of it, per (job, provider, placement)
    mapping(bytes32 => mapping(address => mapping(uint256 => uint256))) public ghostAssigned;
    mapping(bytes32 => mapping(address => mapping(uint256 => uint256))) public ghostAssignedSlashed;

    // ---- ghost: settlements' payout lists (for provePayout) and what disputes froze per payee
    mapping(bytes32 => IJobEscrow.SoloSettlement[]) internal _payoutList; // by job
    mapping(bytes32 => mapping(address => uint256)) internal _frozenOfPayee; // all-time

    // ---- ghost: parameters that take effect the second after they are set (W, S)
    struct Param {
        uint256 current;
        uint256 previous; // in effect up to and including `setAt`
        uint256 setAt;
    }

    Param internal _w;
    Param internal _s;

    // ---- ghost: reservation terms each provider set
    struct Terms {
        bool set;
        uint256 ceiling;
        uint256 horizon;
    }

    mapping(address => Terms) internal _terms;

    // ---- ghost: payouts
    struct Credit {
        uint256 amount;
        uint256 earliest; // not claimable before
        uint256 latest; // claimable by (unless frozen)
    }

    mapping(address => Credit[]) internal _credits;
    mapping(address => uint256) public frozenFrom; // all-time
    mapping(address => uint256) public claimed;

    // ---- ghost: disputes
    struct GhostDispute {
        uint256 id;
        bytes32 jobId;
        address respondent;
        uint256 amount;
        bool settlement;
        bool open;
    }

    GhostDispute[] internal _disputes;
    uint256[] internal _slashIds;

    constructor(TestToken token_, StakeManager sm_, JobEscrow escrow_, Disputes disputes_, address admin_, address orchestrator_, address arbiter_) {
        (token, sm, escrow, disputes, admin, orchestrator, arbiter) =
            (token_, sm_, escrow_, disputes_, admin_, orchestrator_, arbiter_);
        _w = Param(escrow_.disputeWindow(), escrow_.disputeWindow(), 0);
        _s = Param(escrow_.collateralSlashWindow(), escrow_.collateralSlashWindow(), 0);
        address[] memory all = everyone();
        for (uint256 i; i < all.length; ++i) _approveAll(all[i]);
    }

    // ================================================================ helpers

    function _approveAll(address who) internal {
        vm.startPrank(who);
        token.approve(address(sm), type(uint256).max);
        token.approve(address(escrow), type(uint256).max);
        token.approve(address(disputes), type(uint256).max);
        vm.stopPrank();
    }

    function _fail(string memory what) internal {
        if (bytes(violation).length == 0) violation = what;
    }

    function _provider(uint256 seed) internal view returns (address) {
        return providers[seed % 3];
    }

    function _count(string memory name) internal {
        calls[keccak256(bytes(name))] += 1;
    }

    function jobCount() external view returns (uint256) {
        return _jobs.length;
    }

    function jobAt(uint256 i) external view returns (GhostJob memory) {
        return _jobs[i];
    }

    function disputeCount() external view returns (uint256) {
        return _disputes.length;
    }

    function disputeAt(uint256 i) external view returns (GhostDispute memory) {
        return _disputes[i];
    }

    function creditsOf(address who) external view returns (Credit[] memory) {
        return _credits[who];
    }

    function locksOf(address who) external view returns (GhostLock[] memory) {
        return _locks[who];
    }

    function slashIds() external view returns (uint256[] memory) {
        return _slashIds;
    }

    function everyone() public view returns (address[] memory all) {
        all = new address[](7);
        (all[0], all[1], all[2], all[3], all[4], all[5], all[6]) =
            (providers[0], providers[1], providers[2], customers[0], customers[1], stranger, finder);
    }

    function _unbondings() internal view returns (uint256[3] memory u) {
        for (uint256 i; i < 3; ++i) u[i] = sm.stakeOf(providers[i]).unbonding;
    }

    function _stakes() internal view returns (uint256[3] memory s) {
        for (uint256 i; i < 3; ++i) {
            IStakeManager.StakeInfo memory info = sm.stakeOf(providers[i]);
            s[i] = info.bonded + info.unbonding;
        }
    }

    /// @dev After a call that may have slashed: any drop of a provider's unbonding stake that the
    /// other open locks cannot have absorbed must have come out of lock L. That is the least any
    /// attribution of the slash takes from L, so L may pay at most requested - minTaken.
    function _noteSlashes(uint256[3] memory unbondingBefore, uint256[3] memory stakeBefore) internal {
        uint256[3] memory stakeAfter = _stakes();
        uint256[3] memory unbondingAfter = _unbondings();
        for (uint256 i; i < 3; ++i) {
            address p = providers[i];
            if (stakeAfter[i] > stakeBefore[i]) {
                slashedAway[p] -= stakeAfter[i] - stakeBefore[i]; // a reversal
            } else {
                slashedAway[p] += stakeBefore[i] - stakeAfter[i];
            }
            if (unbondingAfter[i] >= unbondingBefore[i]) continue;
            uint256 cut = unbondingBefore[i] - unbondingAfter[i];
            GhostLock[] storage locks = _locks[p];
            for (uint256 k; k < locks.length; ++k) {
                if (!locks[k].open) continue;
                uint256 mine = locks[k].requested - locks[k].minTaken;
                uint256 others = unbondingBefore[i] > mine ? unbondingBefore[i] - mine : 0;
                if (cut > others) locks[k].minTaken += _min(cut - others, mine);
            }
        }
    }

    function _min(uint256 a, uint256 b) internal pure returns (uint256) {
        return a < b ? a : b;
    }

    // ================================================================ time

    function warp(uint256 secs) external {
        _count("warp");
        secs = secs % 10 == 0 ? secs % 3 days : secs % 3 hours;
        vm.warp(block.timestamp + secs);
        vm.roll(block.number + 1);
    }

    // ================================================================ stake

    function stake(uint256 who, uint256 amount) external {
        _count("stake");
        address p = _provider(who);
        amount = 1 + amount % (500 * TOKEN);
        token.mint(p, amount);
        vm.prank(p);
        sm.stake(amount);
        staked[p] += amount;
    }

    function requestUnbond(uint256 who, uint256 share) external {
        _count("requestUnbond");
        address p = _provider(who);
        IStakeManager.StakeInfo memory info = sm.stakeOf(p);
        uint256 free = info.bonded - info.locked;
        if (free == 0) return;
        uint256 amount = 1 + share % free;
        uint256 maturity = block.timestamp + sm.unbondingPeriod();
        vm.prank(p);
        try sm.requestUnbond(amount) returns (uint256 lockId) {
            calls[keccak256("ok:requestUnbond")] += 1;
            _locks[p].push(GhostLock({id: lockId, requested: amount, maturity: maturity, minTaken: 0, open: true}));
        } catch {
            if (sm.openLocks(p).length < sm.MAX_UNBONDING_LOCKS()) _fail("requestUnbond of free stake refused");
        }
    }

    function withdraw(uint256 who, uint256 pick) external {
        _count("withdraw");
        address p = _provider(who);
        GhostLock[] storage locks = _locks[p];
        if (locks.length == 0) return;
        GhostLock storage lock = locks[pick % locks.length];
        uint256 before = token.balanceOf(p);
        vm.prank(p);
        try sm.withdraw(lock.id) {
            uint256 paid = token.balanceOf(p) - before;
            if (!lock.open) _fail("a closed lock paid");
            if (block.timestamp < lock.maturity) _fail("stake left before requestedAt + unbondingPeriod");
            if (paid > lock.requested - lock.minTaken) _fail("a lock paid out slashed stake");
            lock.open = false;
            calls[keccak256("ok:withdraw")] += 1;
            withdrawn[p] += paid;
        } catch {
            if (lock.open && block.timestamp >= lock.maturity && lock.minTaken < lock.requested) {
                IStakeManager.UnbondingLock memory onChain = sm.unbondingLock(p, lock.id);
                if (onChain.amount != 0) _fail("a matured lock could not be withdrawn");
            }
        }
    }

    function cancelUnbond(uint256 who, uint256 pick) external {
        _count("cancelUnbond");
        address p = _provider(who);
        GhostLock[] storage locks = _locks[p];
        if (locks.length == 0) return;
        GhostLock storage lock = locks[pick % locks.length];
        vm.prank(p);
        try sm.cancelUnbond(lock.id) {
            if (!lock.open) _fail("a closed lock was cancelled");
            lock.open = false;
        } catch {}
    }

    // ================================================================ jobs

    function createJob(uint256 who, uint256 amount, uint256 hours_) external {
        _count("createJob");
        if (_jobs.length >= 40) return;
        address c = customers[who % 2];
        amount = 1 + amount % (300 * TOKEN);
        uint256 deadline = block.timestamp + 1 hours + (hours_ % 48) * 1 hours;
        bytes32 id = keccak256(abi.encode("job", _jobs.length));
        token.mint(c, amount);
        vm.prank(c);
        escrow.createJob(id, amount, uint64(deadline), ROOT);
        uint256 closesAt = deadline + escrow.gracePeriod();
        uint256 slashWindow = _at(_s, block.timestamp);
        _jobs.push(
            GhostJob(id, c, amount, deadline, 0, 1, 0, 0, 0, 0, address(0), closesAt, slashWindow, 0, closesAt + slashWindow)
        );
        _jobIndex[id] = _jobs.length;
        _sameWindows(_jobs[_jobs.length - 1]);
    }

    /// @dev The value of `p` a job created or settled at `t` keeps.
    function _at(Param storage p, uint256 t) internal view returns (uint256) {
        return t > p.setAt ? p.current : p.previous;
    }

    /// @dev Rule: no parameter change moves a window of a job that exists.
    function _sameWindows(GhostJob storage job) internal {
        if (escrow.collateralReleasableAt(job.id) != job.releasableAt) _fail("a job's collateral slash window moved");
    }

    /// @dev The first job from `seed` on in `status` (any job when none is), so that most calls
    /// reach jobs they can act on.
    function _pick(uint256 seed, uint8 status) internal view returns (GhostJob storage) {
        uint256 n = _jobs.length;
        for (uint256 k; k < n; ++k) {
            GhostJob storage job = _jobs[(seed + k) % n];
            if (job.status == status) return job;
        }
        return _jobs[seed % n];
    }

    /// @dev A funded job with collateral locked from `seed` on, else any funded job.
    function _pickBacked(uint256 seed) internal view returns (GhostJob storage) {
        uint256 n = _jobs.length;
        for (uint256 k; k < n; ++k) {
            GhostJob storage job = _jobs[(seed + k) % n];
            if (job.status != 1) continue;
            for (uint256 i; i < 3; ++i) if (ghostLocked[job.id][providers[i]] != 0) return job;
        }
        return _pick(seed, 1);
    }

    /// @dev A provider with collateral still locked for `job` when there is one.
    function _backerOf(GhostJob storage job, uint256 seed) internal view returns (address) {
        for (uint256 k; k < 3; ++k) {
            address p = providers[(seed + k) % 3];
            if (ghostLocked[job.id][p] != 0) return p;
        }
        return providers[seed % 3];
    }

    function lockCollateral(uint256 jobSeed, uint256 who, uint256 share) public {
        _count("lockCollateral");
        if (_jobs.length == 0) return;
        GhostJob storage job = _pick(jobSeed, 1);
        address p = _provider(who);
        IStakeManager.StakeInfo memory info = sm.stakeOf(p);
        uint256 free = info.bonded - info.locked;
        if (free == 0) return;
        uint256 amount = 1 + share % free;
        address[] memory ps = new address[](1);
        ps[0] = p;
        uint256[] memory amounts = new uint256[](1);
        amounts[0] = amount;
        vm.prank(orchestrator);
        try escrow.lockCollateral(job.id, ps, amounts) {
            if (job.status != 1 || block.timestamp > job.closesAt) {
                _fail("collateral locked for a closed job");
            }
            ghostLocked[job.id][p] += amount;
        } catch {}
    }

    /// @dev Settles up to three jobs in one of the three forms; payouts are random shares.
    function settle(uint256 form, uint256 jobSeed, uint256 shares) public {
        _count("settle");
        if (_jobs.length == 0) return;
        uint256 n = form % 3 == 0 ? 1 : 1 + (shares % 3);
        bytes32[] memory ids = new bytes32[](n);
        address[] memory payees = new address[](n);
        uint256[] memory payouts = new uint256[](n);
        for (uint256 k; k < n; ++k) {
            GhostJob storage job = k == 0 ? _pickBacked(jobSeed) : _pick(jobSeed + k * 7, 1);
            ids[k] = job.id;
            payees[k] = (shares >> (8 * k)) % 4 == 0 ? _provider(shares >> (8 * k + 2)) : _backerOf(job, shares >> (8 * k + 2));
            payouts[k] = job.amount * ((shares >> (16 + 8 * k)) % 101) / 100;
        }
        for (uint256 k; k < n; ++k) {
            for (uint256 m; m < k; ++m) if (ids[m] == ids[k]) return; // one job once per batch
        }
        bool ok;
        vm.prank(orchestrator);
        if (form % 3 == 0) {
            address[] memory ps = new address[](1);
            ps[0] = payees[0];
            uint256[] memory pay = new uint256[](1);
            pay[0] = payouts[0];
            try escrow.settle(ids[0], ps, pay, ROOT) {
                ok = true;
            } catch {}
        } else if (form % 3 == 1) {
            IJobEscrow.Settlement[] memory batch = new IJobEscrow.Settlement[](n);
            for (uint256 k; k < n; ++k) {
                address[] memory ps = new address[](1);
                ps[0] = payees[k];
                uint256[] memory pay = new uint256[](1);
                pay[0] = payouts[k];
                batch[k] = IJobEscrow.Settlement(ids[k], ps, pay, ROOT);
            }
            try escrow.settleBatch(batch) {
                ok = true;
            } catch {}
        } else {
            IJobEscrow.SoloSettlement[] memory batch = new IJobEscrow.SoloSettlement[](n);
            for (uint256 k; k < n; ++k) batch[k] = IJobEscrow.SoloSettlement(ids[k], payees[k], payouts[k], ROOT);
            try escrow.settleBatchSolo(batch) {
                ok = true;
            } catch {}
        }
        if (!ok) return;
        calls[keccak256("ok:settle")] += 1;
        uint256 window = _at(_w, block.timestamp);
        IJobEscrow.SoloSettlement[] memory list = new IJobEscrow.SoloSettlement[](n);
        for (uint256 k; k < n; ++k) list[k] = IJobEscrow.SoloSettlement(ids[k], payees[k], payouts[k], ROOT);
        for (uint256 k; k < n; ++k) {
            GhostJob storage job = _jobs[_jobIndex[ids[k]] - 1];
            job.settleCount += 1;
            if (job.settleCount > 1) _fail("a job settled twice");
            if (job.status != 1) _fail("a closed job settled");
            if (block.timestamp > job.closesAt) _fail("settled after deadline + grace");
            job.status = 2;
            job.settledAt = block.timestamp;
            job.paid = payouts[k];
            job.payee = payees[k];
            job.window = window;
            job.releasableAt = block.timestamp + job.slashWindow;
            _sameWindows(job);
            for (uint256 m; m < n; ++m) _payoutList[job.id].push(list[m]);
            _lastSettled = _jobIndex[ids[k]];
            if (escrow.jobOf(job.id).refund + payouts[k] != job.amount) _fail("settlement does not add up to the job");
            _credits[payees[k]].push(Credit(payouts[k], block.timestamp + window, block.timestamp + window + PAYOUT_SLACK));
        }
    }

    function reclaim(uint256 jobSeed, uint256 by) external {
        _count("reclaim");
        if (_jobs.length == 0) return;
        GhostJob storage job = _pick(jobSeed, 1);
        address caller = by % 3 == 0 ? stranger : job.customer;
        uint256 before = token.balanceOf(job.customer);
        vm.prank(caller);
        try escrow.reclaim(job.id) {
            if (caller != job.customer) _fail("a stranger reclaimed");
            if (job.status != 1) _fail("a closed job reclaimed");
            if (block.timestamp <= job.closesAt) _fail("reclaimed before deadline + grace");
            if (token.balanceOf(job.customer) - before != job.amount) _fail("reclaim paid another amount");
            job.status = 3;
        } catch {}
    }

    function claim(uint256 who) external {
        _count("claim");
        address[] memory all = everyone();
        address a = all[who % all.length];
        uint256 before = token.balanceOf(a);
        vm.prank(a);
        try escrow.claim() {
            calls[keccak256("ok:claim")] += 1;
            claimed[a] += token.balanceOf(a) - before;
        } catch {}
    }

    function claimRefund(uint256 jobSeed) external {
        _count("claimRefund");
        if (_jobs.length == 0) return;
        GhostJob storage job = _pick(jobSeed, 2);
        uint256 refundBefore = escrow.jobOf(job.id).refund;
        vm.prank(stranger);
        try escrow.claimRefund(job.id) {
            // Only a settlement that paid nobody, its refund whole, pays inside the window.
            bool whole = job.paid == 0 && refundBefore == job.amount;
            if (!whole && block.timestamp < job.settledAt + job.window) _fail("refund paid inside the window");
        } catch {}
    }

    function releaseCollateral(uint256 jobSeed, uint256 who) external {
        _count("releaseCollateral");
        if (_jobs.length == 0) return;
        GhostJob storage job = _jobs[jobSeed % _jobs.length];
        address p = _backerOf(job, who);
        uint256 releasableAt = job.releasableAt;
        _sameWindows(job);
        uint256 lockedBefore = sm.lockedFor(job.id, p);
        vm.prank(stranger);
        try escrow.releaseCollateral(job.id, _one(p)) {
            if (lockedBefore != 0 && block.timestamp < releasableAt) _fail("collateral released inside its slash window");
            if (lockedBefore != 0) calls[keccak256("ok:release")] += 1;
            ghostLocked[job.id][p] = 0;
        } catch {
            if (block.timestamp >= releasableAt) _fail("collateral had no way out");
        }
    }

    function _one(address p) internal pure returns (address[] memory ps) {
        ps = new address[](1);
        ps[0] = p;
    }

    // ================================================================ slashing

    function slash(uint256 who, uint256 amount) external {
        _count("slash");
        address p = _provider(who);
        (uint256[3] memory u, uint256[3] memory s) = (_unbondings(), _stakes());
        vm.prank(orchestrator);
        try sm.slash(p, 1 + amount % (200 * TOKEN), IStakeManager.SlashReason.Other, ROOT) returns (uint256 id) {
            _slashIds.push(id);
        } catch {}
        _noteSlashes(u, s);
    }

    function slashCollateral(uint256 jobSeed, uint256 who, uint256 amount) external {
        _count("slashCollateral");
        if (_jobs.length == 0) return;
        GhostJob storage job = _jobs[jobSeed % _jobs.length];
        address p = _backerOf(job, who);
        uint256 locked = sm.lockedFor(job.id, p);
        bool open = block.timestamp < job.releasableAt;
        _sameWindows(job);
        (uint256[3] memory u, uint256[3] memory s) = (_unbondings(), _stakes());
        vm.prank(orchestrator);
        try sm.slashCollateral(job.id, p, 0, 1 + amount % (100 * TOKEN), IStakeManager.SlashReason.Abandonment, ROOT) returns (uint256 id) {
            calls[keccak256("ok:slashCollateral")] += 1;
            if (!open) _fail("collateral slashed after its slash window");
            if (sm.slashOf(id).amount > locked) _fail("a job-lock slash took more than the lock");
            _slashIds.push(id);
        } catch {
            if (open && locked != 0) _fail("locked collateral not slashable inside its window");
        }
        _noteSlashes(u, s);
    }

    // ================================================================ reservations

    function reserveCollateral(uint256 who, uint256 share, uint256 days_) external {
        _count("reserveCollateral");
        address p = _provider(who);
        IStakeManager.StakeInfo memory info = sm.stakeOf(p);
        (uint256 live, uint256 liveUntil) = sm.reservationOf(p);
        uint256 free = info.bonded - (info.locked - live); // less its job locks
        uint256 amount = share % (free + 1);
        uint256 until = block.timestamp + 1 + days_ % 30 days;
        // A live reservation is raised to at least the request (never lowered or shortened);
        // one made after a lapse starts a new run.
        bool running = liveUntil > block.timestamp;
        if (running) (amount, until) = (_max(amount, live), _max(until, liveUntil));
        bool allowed = _withinTerms(p, amount, until);
        vm.prank(orchestrator);
        try sm.reserveCollateral(_one(p), _amounts(share % (free + 1)), uint64(block.timestamp + 1 + days_ % 30 days)) {
            calls[keccak256("ok:reserveCollateral")] += 1;
            (live, liveUntil) = sm.reservationOf(p);
            if (live != amount || liveUntil != until) _fail("a reservation is not the larger and later of the live one and the request");
            // Rule: what the orchestrator role alone can pin is bounded by what the provider allowed.
            if (!allowed) _fail("a reservation beyond the provider's terms");
            (ghostReserved[p], ghostReservedUntil[p]) = (live, liveUntil);
            if (!running) ghostReservedSince[p] = block.timestamp;
        } catch {
            if (amount <= free && allowed) _fail("a covered reservation was refused");
        }
    }

    /// @dev Whether a reservation of `amount` until `until` keeps to the terms `p` set.
    function _withinTerms(address p, uint256 amount, uint256 until) internal view returns (bool) {
        Terms memory t = _terms[p];
        return !t.set || (amount <= t.ceiling && until <= block.timestamp + t.horizon);
    }

    /// @dev A provider bounds (or lifts the bound on) what may be reserved of its stake; a live
    /// reservation never shrinks or shortens for it.
    function setReservationTerms(uint256 who, uint256 ceiling, uint256 horizon) external {
        _count("setReservationTerms");
        address p = _provider(who);
        (uint256 live, uint256 liveUntil) = sm.reservationOf(p);
        vm.prank(p);
        (ceiling, horizon) = (ceiling % (300 * TOKEN), horizon % 30 days);
        sm.setReservationTerms(ceiling, horizon);
        _terms[p] = Terms(true, ceiling, horizon);
        (uint256 liveAfter, uint256 untilAfter) = sm.reservationOf(p);
        if (liveAfter != live || untilAfter != liveUntil) _fail("new terms moved a live reservation");
    }

    function _max(uint256 a, uint256 b) private pure returns (uint256) {
        return a > b ? a : b;
    }

    /// @dev Commits a two-leaf assignment root (two placements of one provider on one job, of
    /// different collateral) and proves them, by anyone, in either order.
    function assign(uint256 jobSeed, uint256 who, uint256 collateral) public {
        _count("assign");
        if (_jobs.length == 0) return;
        GhostJob storage job = _pick(jobSeed, 1);
        address p = _provider(who);
        uint256 placement = 1 + (collateral >> 128) % 4; // several placements per (job, provider)
        uint256[2] memory amounts = [collateral % (100 * TOKEN), (collateral >> 64) % TOKEN];
        bytes32[2] memory leaves = [_assignLeaf(job.id, p, placement, amounts[0]), _assignLeaf(job.id, p, placement + 4, amounts[1])];
        bytes32 root = leaves[0] < leaves[1]
            ? keccak256(abi.encode(leaves[0], leaves[1]))
            : keccak256(abi.encode(leaves[1], leaves[0]));
        vm.prank(orchestrator);
        try escrow.commitAssignments(root) {
            ghostRootAt[root] = block.timestamp;
        } catch {}
        for (uint256 k; k < 2; ++k) {
            uint256 i = (collateral >> 200) % 2 == 0 ? k : 1 - k;
            uint256 id = placement + 4 * i;
            bytes32[] memory proof = new bytes32[](1);
            proof[0] = leaves[1 - i];
            vm.prank(k == 0 ? stranger : p); // anyone may prove
            escrow.proveAssignment(job.id, p, id, amounts[i], proof);
            (bool proven, uint256 onChain,) = escrow.assignmentOf(job.id, p, id);
            if (!proven) _fail("a proven assignment reads as unproven");
            (bool listed,,) = escrow.payeeOf(job.id, p);
            // Rule: backer status needs the provider's part (the job listed it), not a leaf alone.
            if (escrow.isBacker(job.id, p) != listed) _fail("a backer the job's settlement never listed");
            if (ghostAssigned[job.id][p][id] == 0 && onChain == amounts[i]) ghostAssigned[job.id][p][id] = amounts[i];
            if (onChain != ghostAssigned[job.id][p][id] && ghostAssigned[job.id][p][id] != 0) _fail("a proven placement changed");
            if (onChain == amounts[i]) {
                ghostAssignedAt[job.id][p][id] = _max(ghostAssignedAt[job.id][p][id], ghostRootAt[root]);
            }
        }
    }

    function _assignLeaf(bytes32 jobId, address p, uint256 placement, uint256 collateral) internal pure returns (bytes32) {
        return keccak256(bytes.concat(keccak256(abi.encode(jobId, p, placement, collateral))));
    }

    function slashAssigned(uint256 jobSeed, uint256 who, uint256 amount) external {
        _count("slashAssigned");
        if (_jobs.length == 0) return;
        GhostJob storage job = _jobs[jobSeed % _jobs.length];
        address p = _provider(who);
        uint256 placement = 1 + (amount >> 128) % 8;
        bool open = block.timestamp < job.releasableAt;
        _sameWindows(job);
        (uint256 live,) = sm.reservationOf(p);
        uint256 left = ghostAssigned[job.id][p][placement] - ghostAssignedSlashed[job.id][p][placement];
        // Backed only by the reservation live when the placement's (latest) root was committed.
        bool backed = ghostAssignedAt[job.id][p][placement] >= ghostReservedSince[p];
        (uint256[3] memory u, uint256[3] memory s) = (_unbondings(), _stakes());
        vm.prank(orchestrator);
        try sm.slashCollateral(job.id, p, placement, 1 + amount % (100 * TOKEN), IStakeManager.SlashReason.Abandonment, ROOT) returns (uint256 id) {
            calls[keccak256("ok:slashAssigned")] += 1;
            uint256 taken = sm.slashOf(id).amount;
            if (!open) _fail("assigned collateral slashed after its slash window");
            if (taken > left || taken > live) _fail("a slash took more than the assignment or the live reservation");
            if (!backed) _fail("a reservation made after a placement's root paid for it");
            if (sm.slashOf(id).beneficiary != job.customer) _fail("an assignment slash did not go to the customer");
            ghostAssignedSlashed[job.id][p][placement] += taken;
            _slashIds.push(id);
        } catch {
            // Rule: each placement is slashable up to its own amount while its window is open,
            // whatever else was proven or slashed.
            if (open && left != 0 && live != 0 && backed) _fail("a proven placement not slashable inside its window");
        }
        _noteSlashes(u, s);
    }

    function _amounts(uint256 a) internal pure returns (uint256[] memory xs) {
        xs = new uint256[](1);
        xs[0] = a;
    }

    function scoreSlash(uint256 who, uint256 by, uint256 score, uint256 age) external {
        _count("scoreSlash");
        address p = _provider(who);
        uint64 epoch = uint64(block.timestamp / 1 hours);
        score = score % 10_000;
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(p, score, ROOT))));
        uint256 covered = _stakes()[_idx(p)]; // what the commitment covers: the stake now
        vm.prank(orchestrator);
        try sm.commitEpoch(epoch, leaf) {} catch {
            return; // this hour's epoch exists already
        }
        uint256 committedAt = block.timestamp;
        address f = by % 4 == 0 ? p : (by % 4 == 1 ? stranger : finder);
        bytes32 salt = keccak256(abi.encode(by));
        vm.prank(f);
        sm.commitFinding(keccak256(abi.encode(f, p, epoch, score, ROOT, salt)));
        vm.warp(block.timestamp + age % 2 days);
        vm.roll(block.number + 1);
        (uint256[3] memory u, uint256[3] memory s) = (_unbondings(), _stakes());
        address thief = by % 8 == 6 ? stranger : f; // sometimes a copied reveal
        vm.prank(thief);
        try sm.slashForScore(p, epoch, score, ROOT, new bytes32[](0), salt) returns (uint256 id) {
            if (thief == p) _fail("a provider found itself");
            if (thief != f) _fail("a copied reveal slashed");
            if (block.timestamp > committedAt + sm.scoreProofWindow()) _fail("a stale proof slashed");
            uint256 taken = s[_idx(p)] - _stakes()[_idx(p)];
            (, uint16 slashBps,) = sm.scoreSlashing();
            if (taken > covered * slashBps / 10_000) _fail("a score slash took stake the commitment did not cover");
            calls[keccak256("ok:score")] += 1;
            if (id != 0) _slashIds.push(id);
        } catch {}
        _noteSlashes(u, s);
    }

    function _idx(address p) internal view returns (uint256) {
        return p == providers[0] ? 0 : (p == providers[1] ? 1 : 2);
    }

    function releaseSlash(uint256 pick) external {
        _count("releaseSlash");
        if (_slashIds.length == 0) return;
        uint256 id = _slashIds[pick % _slashIds.length];
        IStakeManager.Slash memory before = sm.slashOf(id);
        vm.prank(stranger);
        try sm.releaseSlash(id) {
            if (block.timestamp < before.releasableAt) _fail("slash released inside its dispute window");
        } catch {}
    }

    function setTier(uint256 who, uint256 tier) external {
        _count("setTier");
        vm.prank(orchestrator);
        sm.setTier(_provider(who), IStakeManager.Tier(tier % 3));
    }

    // ================================================================ disputes

    function disputeSettlement(uint256 jobSeed, uint256 by, uint256 whom, uint256 amount) public {
        _count("disputeSettlement");
        if (_jobs.length == 0) return;
        GhostJob storage job = jobSeed % 3 != 0 && _lastSettled != 0 ? _jobs[_lastSettled - 1] : _pick(jobSeed, 2);
        address payee = job.payee == address(0) || whom % 4 == 0 ? _provider(whom >> 2) : job.payee;
        address opener;
        address respondent;
        if (by % 3 == 0) {
            (opener, respondent) = (job.customer, payee); // customer vs a provider
        } else if (by % 3 == 1) {
            (opener, respondent) = (payee, job.customer); // a provider vs the refund
        } else {
            (opener, respondent) = (stranger, whom % 2 == 0 ? job.customer : _provider(whom));
        }
        amount = 1 + amount % (amount % 2 == 0 ? job.amount / 4 + 1 : job.amount + 1);
        token.mint(opener, disputes.bond());
        address party = opener == job.customer ? respondent : opener;
        for (uint256 k; k < 2 && _payoutList[job.id].length != 0; ++k) {
            address who = k == 0 ? respondent : opener; // anyone may prove what the job paid either
            if (who == job.customer) continue;
            vm.prank(stranger);
            try escrow.provePayout(job.id, who, _payoutList[job.id]) {} catch {}
        }
        (, uint256 paidToRespondent,) = escrow.payeeOf(job.id, respondent);
        if (respondent == job.payee && respondent != job.customer && _payoutList[job.id].length != 0 && paidToRespondent != job.paid) {
            _fail("a proven payout is not what the job paid");
        }
        bool backer = escrow.isBacker(job.id, party);
        (bool listed,,) = escrow.payeeOf(job.id, party);
        if (backer != listed) _fail("a party to disputes the job's settlement never listed");
        vm.prank(opener);
        try disputes.disputeSettlement(job.id, respondent, amount, ROOT) returns (uint256 id) {
            if (!backer) _fail("a dispute named someone who did not back the job");
            if (job.status != 2) _fail("an unsettled job was disputed");
            job.frozenNow += amount;
            if (job.frozenNow > job.amount) _fail("disputes froze more than the job's amount");
            if (respondent != job.customer) {
                job.frozenFromPayees += amount;
                if (job.frozenFromPayees > job.paid) _fail("disputes froze more than the job paid");
                // Rule: a freeze about job J takes only from what J paid the respondent.
                _frozenOfPayee[job.id][respondent] += amount;
                if (respondent != job.payee || _frozenOfPayee[job.id][respondent] > job.paid) {
                    _fail("a freeze took more than the job paid the respondent");
                }
                if (block.timestamp >= job.settledAt + job.window) _fail("a freeze after the job's own window");
                frozenFrom[respondent] += amount;
            }
            calls[keccak256("ok:dispute")] += 1;
            _disputes.push(GhostDispute(id, job.id, respondent, amount, true, true));
        } catch {}
    }

    /// @dev A settlement and, at once, a dispute about it by one of its parties (disputes need a
    /// settled job inside its window: random sequences rarely line that up on their own).
    function settleThenDispute(uint256 jobSeed, uint256 who, uint256 shares, uint256 by, uint256 amount) external {
        lockCollateral(jobSeed, who, shares);
        settle(0, jobSeed, shares | 1); // pays a backer of the job
        disputeSettlement(1, by, 1, amount);
    }

    function disputeSlash(uint256 pick) external {
        _count("disputeSlash");
        if (_slashIds.length == 0) return;
        uint256 id = _slashIds[pick % _slashIds.length];
        address p = sm.slashOf(id).provider;
        token.mint(p, disputes.bond());
        vm.prank(p);
        try disputes.disputeSlash(id, ROOT) returns (uint256 disputeId) {
            _disputes.push(GhostDispute(disputeId, bytes32(id), address(0), 0, false, true));
        } catch {}
    }

    function rule(uint256 pick, bool granted, uint256 slashAmount) external {
        _count("rule");
        if (_disputes.length == 0) return;
        GhostDispute storage d = _disputes[pick % _disputes.length];
        slashAmount = granted && slashAmount % 2 == 0 ? slashAmount % (d.amount + 2) : 0;
        (uint256[3] memory u, uint256[3] memory s) = (_unbondings(), _stakes());
        uint256 slashesBefore = sm.slashCount();
        vm.prank(arbiter);
        try disputes.rule(d.id, granted, slashAmount, ROOT) {
            if (slashAmount > d.amount) _fail("an arbiter slashed more than the dispute is about");
            calls[keccak256("ok:rule")] += 1;
            _closeDispute(d, granted);
            for (uint256 id = slashesBefore + 1; id <= sm.slashCount(); ++id) _slashIds.push(id);
        } catch {}
        _noteSlashes(u, s);
    }

    function applyDefaultRuling(uint256 pick) external {
        _count("applyDefaultRuling");
        if (_disputes.length == 0) return;
        GhostDispute storage d = _disputes[pick % _disputes.length];
        (uint256[3] memory u, uint256[3] memory s) = (_unbondings(), _stakes());
        vm.prank(stranger);
        try disputes.applyDefaultRuling(d.id) {
            _closeDispute(d, false);
        } catch {}
        _noteSlashes(u, s);
    }

    function _closeDispute(GhostDispute storage d, bool granted) internal {
        if (!d.open) _fail("a dispute ended twice");
        d.open = false;
        if (!d.settlement) return;
        GhostJob storage job = _jobs[_jobIndex[d.jobId] - 1];
        job.frozenNow -= d.amount;
        IDisputes.Dispute memory record = disputes.disputeOf(d.id);
        if (granted) {
            _credits[record.opener].push(Credit(d.amount, 0, block.timestamp)); // the winner claims at once
        } else if (d.respondent != job.customer) {
            // Back to the rest of the job's window: claimable by settledAt + two periods (the
            // longest window plus rounding), never before the window; the freeze stays counted
            // against the settlement's own credit.
            _credits[d.respondent].push(Credit(d.amount, job.settledAt + job.window, job.settledAt + job.window + PAYOUT_SLACK));
        }
    }

    // ================================================================ admin

    function _set(Param storage p, uint256 value) internal {
        if (block.timestamp != p.setAt) (p.previous, p.setAt) = (p.current, block.timestamp);
        p.current = value;
    }

    function setParameter(uint256 which, uint256 value) external {
        _count("setParameter");
        which = which % 8;
        value = value % 40 days;
        vm.startPrank(admin);
        bool ok;
        uint256 max;
        if (which == 0) {
            max = escrow.PAYOUT_PERIOD();
            try escrow.setDisputeWindow(uint64(value)) { ok = true; } catch {}
            if (ok) _set(_w, value);
        } else if (which == 1) {
            max = escrow.MAX_PERIOD();
            try escrow.setGracePeriod(uint64(value)) { ok = true; } catch {}
        } else if (which == 2) {
            max = escrow.MAX_PERIOD();
            try escrow.setCollateralSlashWindow(uint64(value)) { ok = true; } catch {}
            if (ok) _set(_s, value);
        } else if (which == 3) {
            max = sm.MAX_PERIOD();
            try sm.setUnbondingPeriod(uint64(value)) { ok = true; } catch {}
        } else if (which == 4) {
            max = sm.MAX_PERIOD();
            try sm.setSlashDisputeWindow(uint64(value)) { ok = true; } catch {}
        } else if (which == 5) {
            max = type(uint96).max;
            value = value % (20 * TOKEN);
            try disputes.setBond(uint96(value)) { ok = true; } catch {}
            if (ok && value == 0) _fail("a free dispute bond");
        } else if (which == 6) {
            max = disputes.MAX_RULING_PERIOD();
            value = value % (40 days);
            try disputes.setRulingPeriod(uint64(value)) { ok = true; } catch {}
        } else {
            max = 10_000;
            try sm.setScoreSlashing(uint16(value % 10_001), uint16((value >> 16) % 10_001), uint16((value >> 32) % 10_001)) {
                ok = true;
            } catch {}
            value = 0;
        }
        vm.stopPrank();
        if (ok && value > max) _fail("a parameter was set out of its bounds");
        if (!ok && value <= max && which != 5 && which != 6) _fail("an in-bounds parameter was refused");
    }
}
