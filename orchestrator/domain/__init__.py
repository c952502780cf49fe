"""Pure domain logic: no web3, no SQLAlchemy, no I/O. The simulator drives this same code."""
