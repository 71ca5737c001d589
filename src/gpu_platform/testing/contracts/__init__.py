"""Adapter contract suites: subclass one per adapter (and its fake) in tests/contract/."""
