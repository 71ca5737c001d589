"""`GrpcRaftTransport`: Raft messages between peers over gRPC (grpcio, asyncio)."""

from gpu_platform.adapters.outbound.raft_grpc.codec import decode_message, encode_message
from gpu_platform.adapters.outbound.raft_grpc.transport import GrpcRaftTransport, parse_peers

__all__ = ["GrpcRaftTransport", "decode_message", "encode_message", "parse_peers"]
