"""Ports: the Protocols the application offers (inbound) and needs (outbound)."""
