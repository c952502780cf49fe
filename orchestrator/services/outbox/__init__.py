"""The outbox sender: every chain action the orchestrator queued lands on chain exactly once.

One pass (`sender.OutboxSender.work`) runs under the leader lease `outbox-sender`
(`scheduling.periodic.LeaderRunner`), so two orchestrator processes never both send, and
does all its bookkeeping in that lease's transaction:

1. Resolve `sent` rows by the receipts of every version signed at their nonce (a stuck one
   is replaced, and any version sent may be the one mined). Success with `confirmations`
   blocks on top -> `confirmed`. No receipt -> broadcast the newest signed bytes again (same
   nonce, so at most one version lands; a transaction the node dropped is back in its pool).
   Not mined `replace_after_s` after it was signed -> a replacement at the same nonce with
   both fees up at least 12.5 % (`domain.fees`, within the fee cap), persisted before it is
   broadcast. Waiting above a gap (nonces below it that no transaction holds) -> the gap is
   filled with empty transfers to ourselves. If the node says that nonce is spent and no
   version has a receipt, those bytes can never land and the rows are signed afresh. A mined
   revert is decoded by replaying the call and handled as in 3.
2. Sign `pending` rows in queue order: a contiguous run of `settle` rows becomes ONE
   `settleBatch` (`settleBatchSolo` when every job has one provider; at most
   `settle_batch_size` jobs), a contiguous run of `assign` rows ONE `commitAssignments`
   of their Merkle root (as many); a `prove` row carries the proof built from the assign
   rows its root was committed with; any other kind is one transaction. The
   signed bytes, hash and nonce are written to the rows (status `sent`), and broadcast only
   after the transaction commits: what reaches the chain is always on disk first. New rows
   are signed only when every in-flight transaction is accounted for, so nonces never clash.
   Nonces come from the database (`chain_nonces`), not from the node between passes; after
   any error, and in a newly started process, they are resynced from the chain's pending
   count, never below a nonce one of our rows' transactions holds (in flight, broadcast or
   not, or confirmed: a reorg the index has not seen yet may have taken it off the chain).
3. Reverts (at gas estimation or when mined): an error that proves the action already took
   effect -> `confirmed` with a note (`JobEscrowAlreadySettled` while the escrow shows the
   job Settled; `StakeManagerEpochAlreadyCommitted` when the stored root is the same;
   `JobEscrowAssignmentsAlreadyCommitted`, whose root is the run's). Any
   other revert -> `failed` with the decoded error, counted in `mesh_outbox_failed_total`,
   never resent. Before a settle batch is signed each job's escrow is read: jobs already
   settled are confirmed and left out, and jobs that would revert alone are failed and left
   out, so one bad job cannot block the others.
   A transaction that ran out of gas is no verdict either: its rows are signed again.
   A revert seen while a transaction ahead in the queue is still unmined is no verdict (a
   slash estimated before its lock landed): the pass stops and the next one re-checks.
4. Transient RPC errors undo that unit's changes, count an attempt and back off
   exponentially; rows behind it wait, so actions reach the chain in the order queued.
   A slow node is an RPC error too: the web3 connection's timeout ends the request.

`reorgs.resend_reorged` is the indexer's way back in: confirmed rows whose mined transaction a
reorg removed go back in flight, and step 1 sends their bytes again; their jobs go back to
settling, and a receipt no longer settles them (`settlement.mark_settled(final=False)`): the
re-sent settlement's final event does.

Rows are read through the one codec (`domain.chain_actions`); a row it refuses fails as
`InvalidPayload`. A confirmed settle hands its job to `services.settlement.mark_settled`, the
one owner of settling -> settled. Every chain call is `chain.outbox_tx`'s.

The modules, one seam each; `sender.OutboxSender` composes them:
- `sender`: the pass (step 1, then 2), its metrics counted and its transactions broadcast
  after commit, the lease's name and the service's `build_sender`.
- `config`: `SenderConfig`, the knobs every seam reads.
- `units`: what a unit of a pass did (`Tally`), the savepoint each unit runs in with its
  backoff on transient errors (step 4), and `WaitForChain`.
- `resolve`: step 1, the in-flight transactions (receipts, confirmations, rebroadcasts,
  replacements, mined reverts and their culprits).
- `sign`: step 2, the pending rows (runs, batches, fees, persisting before broadcast).
- `nonces`: each key's next nonce, its resync from the chain and the gaps below ours.
- `verdicts`: step 3, what an outcome means for rows and jobs (confirmed, failed, reverts
  that prove the action done).
- `reorgs`: the indexer's entry points for confirmed rows a reorg took off the chain.
"""
