"""Cluster identity on the wire: the token agents present, compared in constant time.

The token (see `infrastructure.cluster_token` for where it comes from) travels as gRPC
metadata `gpu-platform-cluster-token` on an agent's stream; the cluster id, a digest of it, is
what logs and refusals show.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["TOKEN_METADATA", "cluster_id", "same_cluster"]

#: gRPC metadata key carrying the token on agents' streams.
TOKEN_METADATA = "gpu-platform-cluster-token"


def cluster_id(token: str) -> str:
    """A short public name of the cluster the token belongs to."""
    return "c-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def same_cluster(expected: str, presented: str | None) -> bool:
    """Constant-time comparison of a presented token with the cluster's."""
    if not presented:
        return False
    want = hashlib.sha256(expected.encode()).digest()
    got = hashlib.sha256(presented.encode()).digest()
    return hmac.compare_digest(want, got)
