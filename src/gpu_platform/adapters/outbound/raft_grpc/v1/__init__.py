"""Generated from raft.proto by `make proto`; do not edit by hand."""
