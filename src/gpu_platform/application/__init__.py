"""Use cases: the control plane (commands, queries) and the scheduler loop."""
