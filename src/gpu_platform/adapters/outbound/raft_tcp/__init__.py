"""`TcpRaftTransport`: Raft messages between peers over plain TCP (or TLS) sockets."""

from gpu_platform.adapters.outbound.raft_tcp.transport import TcpRaftTransport

__all__ = ["TcpRaftTransport"]
