"""Content-addressed blobs (checkpoints, results, inputs) on local disk."""
