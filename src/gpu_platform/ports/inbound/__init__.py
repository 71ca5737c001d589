"""Inbound ports: what the application offers to REST, gRPC and the CLI."""
