"""The RunAsService RPCs: admins list, set and delete run-as grants (the same rules as REST's
/v1/run-as). Errors: PERMISSION_DENIED not an admin, INVALID_ARGUMENT naming `accounts`
(trailing metadata `field`), NOT_FOUND deleting a grant that does not exist."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from gpu_platform.adapters.inbound.grpc.auth import current_principal
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.domain.model.run_as import RunAsGrant
from gpu_platform.ports.inbound.run_as import RunAsAdmin

__all__ = ["RunAsServicer"]

Call = Callable[[grpc.ServicerContext, Callable[[], Any]], Any]


def _grant(g: RunAsGrant) -> pb.RunAsGrant:
    return pb.RunAsGrant(tenant=g.tenant, accounts=list(g.accounts), allow_root=g.allow_root)


class RunAsServicer(pb_grpc.RunAsServiceServicer):
    """`call` maps domain and access errors to status codes (grpc.server's `_call`)."""

    def __init__(self, run_as: RunAsAdmin, call: Call) -> None:
        self._run_as = run_as
        self._call = call

    def ListGrants(  # noqa: N802  the proto's RPC name
        self, request: pb.RunAsListRequest, context: grpc.ServicerContext
    ) -> pb.RunAsListResponse:
        found = self._call(context, lambda: self._run_as.grants(current_principal()))
        return pb.RunAsListResponse(grants=[_grant(g) for g in found])

    def SetGrant(  # noqa: N802  the proto's RPC name
        self, request: pb.RunAsSetRequest, context: grpc.ServicerContext
    ) -> pb.RunAsGrant:
        made = self._call(
            context,
            lambda: self._run_as.grant(
                current_principal(), request.tenant, list(request.accounts), request.allow_root
            ),
        )
        return _grant(made)

    def DeleteGrant(  # noqa: N802  the proto's RPC name
        self, request: pb.RunAsDeleteRequest, context: grpc.ServicerContext
    ) -> pb.RunAsDeleteResponse:
        self._call(context, lambda: self._run_as.revoke(current_principal(), request.tenant))
        return pb.RunAsDeleteResponse()
