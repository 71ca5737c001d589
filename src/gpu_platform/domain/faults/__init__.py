"""Fault and lifecycle state machines, each one transition table."""
