"""Placement of tasks on GPU slots and the periodic reconcile work around it."""
