"""The pure core: standard library only, deterministic, no I/O, no clock, no global randomness."""
