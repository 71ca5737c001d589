"""gRPC API (grpcio): JobService and ClusterService, health and reflection."""

from gpu_platform.adapters.inbound.grpc.server import GrpcServer

__all__ = ["GrpcServer"]
