"""AdminService over gRPC: hardware actions, nodes, the audit log, tenants and tokens, with
the same rules as REST's admin and access routes."""

from __future__ import annotations

import dataclasses

import grpc

from gpu_platform.adapters.inbound.grpc.auth import current_principal
from gpu_platform.adapters.inbound.grpc.convert import gpu_to_pb
from gpu_platform.adapters.inbound.grpc.outcomes import call
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.application.auth_scope import AuditTrail
from gpu_platform.domain.errors import NotFound
from gpu_platform.domain.model.tenancy import Permission, Role
from gpu_platform.ports.inbound.access import AccessService, TokenInfo
from gpu_platform.ports.inbound.admin_service import AdminService
from gpu_platform.ports.inbound.job_service import JobService

__all__ = ["AdminServicer"]


def _token_pb(t: TokenInfo, secret: str = "") -> pb.Token:
    msg = pb.Token(
        token_id=t.token_id,
        name=t.name,
        tenant=t.tenant,
        role=str(t.role),
        created_at=t.created_at,
        secret=secret,
    )
    if t.revoked_at is not None:
        msg.revoked_at = t.revoked_at
    return msg


_ACTIONS = ("drain", "offline", "online")


class AdminServicer(pb_grpc.AdminServiceServicer):
    """The AdminService RPCs; the same rules as REST's admin and access routes."""

    def __init__(
        self, service: JobService, admin: AdminService, access: AccessService, trail: AuditTrail
    ) -> None:
        self._service = service
        self._admin = admin
        self._access = access
        self._trail = trail

    def _operator(
        self, context: grpc.ServicerContext, action: str, allowed: tuple[str, ...] = _ACTIONS
    ) -> str:
        who = current_principal()
        if action not in allowed:
            context.set_trailing_metadata((("field", "action"),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"action: one of {_ACTIONS}")
        if not who.may(Permission.HARDWARE_ADMIN):
            self._trail.record(who, "hardware.action", "-", f"refused: role {who.role}")
        call(context, lambda: who.require(Permission.HARDWARE_ADMIN))
        return who.name

    def GpuAction(self, request: pb.GpuActionRequest, context: grpc.ServicerContext) -> pb.Gpu:
        actor = self._operator(context, request.action)

        def act() -> pb.Gpu:
            self._admin.gpu_action(
                request.node,
                request.index,
                request.action,  # type: ignore[arg-type]  # checked by _operator
                reason=request.reason,
                actor=actor,
                force=request.force,
            )
            for info in self._service.gpus():
                if info.gpu.node == request.node and info.gpu.index == request.index:
                    return gpu_to_pb(info)
            raise NotFound("gpu", f"{request.node}:{request.index}")  # pragma: no cover

        return call(context, act)

    def NodeAction(self, request: pb.NodeActionRequest, context: grpc.ServicerContext) -> pb.Node:
        actor = self._operator(context, request.action)

        def act() -> pb.Node:
            self._admin.node_action(
                request.node,
                request.action,  # type: ignore[arg-type]  # checked by _operator
                reason=request.reason,
                actor=actor,
                force=request.force,
            )
            n = next(n for n in self._admin.nodes() if n.name == request.node)
            return pb.Node(
                name=n.name, state=str(n.state), reason=n.reason, gpus=n.gpus, jobs=n.jobs
            )

        return call(context, act)

    def RemoveNode(
        self, request: pb.RemoveNodeRequest, context: grpc.ServicerContext
    ) -> pb.RemoveNodeResponse:
        actor = self._operator(context, "remove", ("remove",))

        def act() -> pb.RemoveNodeResponse:
            self._admin.remove_node(request.node, reason=request.reason, actor=actor)
            return pb.RemoveNodeResponse()

        return call(context, act)

    def ListNodes(
        self, request: pb.ListNodesRequest, context: grpc.ServicerContext
    ) -> pb.ListNodesResponse:
        call(context, lambda: current_principal().require(Permission.CLUSTER_READ))
        return pb.ListNodesResponse(
            nodes=[
                pb.Node(name=n.name, state=str(n.state), reason=n.reason, gpus=n.gpus, jobs=n.jobs)
                for n in self._admin.nodes()
            ]
        )

    def ListAudit(
        self, request: pb.AuditRequest, context: grpc.ServicerContext
    ) -> pb.AuditResponse:
        call(context, lambda: current_principal().require(Permission.AUDIT_READ))
        if request.limit < 0 or request.limit > 10000:
            context.set_trailing_metadata((("field", "limit"),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "limit: 0..10000")
        records = self._admin.audit(request.limit or 100)
        return pb.AuditResponse(entries=[pb.AuditEntry(**dataclasses.asdict(a)) for a in records])

    def CreateTenant(
        self, request: pb.CreateTenantRequest, context: grpc.ServicerContext
    ) -> pb.Tenant:
        t = call(context, lambda: self._access.create_tenant(current_principal(), request.name))
        return pb.Tenant(name=t.name, created_at=t.created_at)

    def ListTenants(
        self, request: pb.ListTenantsRequest, context: grpc.ServicerContext
    ) -> pb.ListTenantsResponse:
        found = call(context, lambda: self._access.tenants(current_principal()))
        return pb.ListTenantsResponse(
            tenants=[pb.Tenant(name=t.name, created_at=t.created_at) for t in found]
        )

    def CreateToken(
        self, request: pb.CreateTokenRequest, context: grpc.ServicerContext
    ) -> pb.Token:
        who = current_principal()
        if request.role not in {str(r) for r in Role}:
            context.set_trailing_metadata((("field", "role"),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "role: admin, operator, user or viewer")
        issued = call(
            context,
            lambda: self._access.create_token(
                who, request.name, request.tenant, Role(request.role)
            ),
        )
        return _token_pb(issued.info, issued.secret)

    def ListTokens(
        self, request: pb.ListTokensRequest, context: grpc.ServicerContext
    ) -> pb.ListTokensResponse:
        found = call(context, lambda: self._access.tokens(current_principal()))
        return pb.ListTokensResponse(tokens=[_token_pb(t) for t in found])

    def RevokeToken(
        self, request: pb.RevokeTokenRequest, context: grpc.ServicerContext
    ) -> pb.Token:
        info = call(
            context, lambda: self._access.revoke_token(current_principal(), request.token_id)
        )
        return _token_pb(info)
