"""The `mesh` tools: the command line every role uses, the customer's SDK, the benchmarks (with
the cheating providers they measure against), the demo, the local grid, the cut proxy and the
churn simulator. They use the service (`orchestrator`), the provider agent (`agent`) and
`protocol`; nothing of theirs is imported by either."""
