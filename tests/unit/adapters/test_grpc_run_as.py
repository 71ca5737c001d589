"""Run-as grants over gRPC on a real loopback server with authentication on: only admins set
them, root needs allow_root, and a submit naming an account its tenant was not granted is
INVALID_ARGUMENT naming `user`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.wired import admin_and_user, use_fakes


class Api:
    def __init__(self, channel: grpc.Channel, admin: str, user: str) -> None:
        self.jobs = pb_grpc.JobServiceStub(channel)
        self.run_as = pb_grpc.RunAsServiceStub(channel)
        self.admin = (("authorization", f"Bearer {admin}"),)
        self.user = (("authorization", f"Bearer {user}"),)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    tmp: Path = tmp_path_factory.mktemp("grpc-run-as")
    container = Container(
        settings=Settings(
            server_id=0, data_dir=tmp, grpc_port=0, auth="on", rate_limit_per_second=0
        )
    )
    inventory = Inventory((default_node(),), source="sim", simulated=True)
    use_fakes(container, inventory)
    admin, user = admin_and_user(container)
    server = container.grpc_server()
    assert server is not None
    try:
        with grpc.insecure_channel(server.address) as channel:
            yield Api(channel, admin.secret, user.secret)
    finally:
        container.shutdown_resources()


def test_a_submit_naming_root_is_invalid_argument_naming_user(api: Api) -> None:
    for who in (api.user, api.admin):
        request = pb.SubmitJobRequest(command=["true"], tenant="acme", user="root")
        with pytest.raises(grpc.RpcError) as err:
            api.jobs.SubmitJob(request, metadata=who, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "user" in (err.value.details() or "")
        assert ("field", "user") in (err.value.trailing_metadata() or ())


def test_admins_set_list_and_delete_grants_and_users_may_not(api: Api) -> None:
    grant = pb.RunAsSetRequest(tenant="acme", accounts=["daemon"])
    with pytest.raises(grpc.RpcError) as err:
        api.run_as.SetGrant(grant, metadata=api.user, timeout=10)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as err:
        api.run_as.SetGrant(
            pb.RunAsSetRequest(tenant="acme", accounts=["root"]), metadata=api.admin, timeout=10
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "accounts" in (err.value.details() or "")
    made = api.run_as.SetGrant(grant, metadata=api.admin, timeout=10)
    assert (made.tenant, list(made.accounts), made.allow_root) == ("acme", ["daemon"], False)
    listed = api.run_as.ListGrants(pb.RunAsListRequest(), metadata=api.admin, timeout=10)
    assert [g.tenant for g in listed.grants] == ["acme"]
    job = api.jobs.SubmitJob(
        pb.SubmitJobRequest(command=["true"], user="daemon"), metadata=api.user, timeout=10
    )
    assert job.user == "daemon" and job.tenant == "acme"
    api.run_as.DeleteGrant(pb.RunAsDeleteRequest(tenant="acme"), metadata=api.admin, timeout=10)
    with pytest.raises(grpc.RpcError) as err:
        api.run_as.DeleteGrant(pb.RunAsDeleteRequest(tenant="acme"), metadata=api.admin, timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
