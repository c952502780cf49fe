"""Use cases: what routes and periodic jobs call. Each module is one concern; they call
`domain/` (decisions), `db/` (queries, in the caller's transaction) and `chain/` (web3)."""
