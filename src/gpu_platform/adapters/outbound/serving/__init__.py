"""Serving on the node: ports and health checks for service replicas."""
