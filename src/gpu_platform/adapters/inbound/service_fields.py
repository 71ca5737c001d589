"""A service's fields on the wire, mapped once for REST, gRPC and the CLI.

The REST body (`rest.services.ServiceIn`), the proto message (`ServiceSpec`) and the CLI's
JSON carry exactly the fields of `domain.services.model.ServiceSpec`, under the same names:
`SPEC_FIELDS` lists them; `spec_values` gives a spec's values in wire form (`command` a
list, `env` a dict), `spec_from_values` builds a spec back from such values. A field added to
ServiceSpec but not to a wire fails loudly there (a KeyError, or the wire's own refusal of an
unknown field). gRPC first applies the proto's presence rules (`grpc.services`).
`replica_values` is the same for a replica's read model (`ReplicaOut`, `ServiceReplica`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from gpu_platform.domain.services.model import ServiceSpec
from gpu_platform.ports.inbound.services import ReplicaInfo

__all__ = ["SPEC_FIELDS", "replica_values", "spec_from_values", "spec_values"]

SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ServiceSpec))


def spec_values(spec: ServiceSpec) -> dict[str, Any]:
    """Every field of `spec` by name, `command` as a list and `env` as a dict."""
    values = {name: getattr(spec, name) for name in SPEC_FIELDS}
    values.update(command=list(spec.command), env=dict(spec.env))
    return values


def spec_from_values(values: Mapping[str, Any], default_tenant: str) -> ServiceSpec:
    """The spec of wire `values` (every field of SPEC_FIELDS); an empty tenant is
    `default_tenant` (the caller's); `env` is kept as sorted pairs."""
    given = {name: values[name] for name in SPEC_FIELDS}
    given.update(
        command=tuple(values["command"]),
        env=tuple(sorted(values["env"].items())),
        tenant=values["tenant"] or default_tenant,
    )
    return ServiceSpec(**given)


def replica_values(r: ReplicaInfo) -> dict[str, Any]:
    """Every field of `r` by name, `gpus` as a list and `not_before` as `restart_at` (None
    when the replica is not waiting to restart)."""
    values = {f.name: getattr(r, f.name) for f in fields(ReplicaInfo) if f.name != "not_before"}
    values.update(gpus=list(r.gpus), restart_at=r.not_before or None)
    return values
