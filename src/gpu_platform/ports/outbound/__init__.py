"""Outbound ports: what the application needs from the world."""
