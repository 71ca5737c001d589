"""How a servicer's outcome becomes a gRPC answer (the map in server.py's docstring).

`call(context, fn)` runs `fn` (a follower answers from its own state when the call's
`gpu-platform-read-consistency` metadata is "stale") and turns the domain's errors into
status codes, naming the field of an InvalidRequest in the `field` trailing metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import grpc

from gpu_platform.adapters.inbound.grpc.agent_service import LEADER_METADATA
from gpu_platform.adapters.inbound.grpc.auth import abort_access
from gpu_platform.application.consistency import LeaderElsewhere, stale_reads
from gpu_platform.application.raft_node import NodeStopped
from gpu_platform.domain.errors import (
    Conflict,
    DomainError,
    IllegalTransition,
    InvalidRequest,
    NotFound,
)
from gpu_platform.domain.model.tenancy import AccessError

__all__ = ["READ_CONSISTENCY_METADATA", "call"]

T = TypeVar("T")

READ_CONSISTENCY_METADATA = "gpu-platform-read-consistency"  # "stale": a follower answers


def call(context: grpc.ServicerContext, fn: Callable[[], T]) -> T:
    metadata = dict(context.invocation_metadata() or ())
    stale = str(metadata.get(READ_CONSISTENCY_METADATA, "")).lower() == "stale"
    try:
        with stale_reads(stale):
            return fn()
    except AccessError as exc:
        abort_access(context, exc)
    except LeaderElsewhere as exc:
        context.set_trailing_metadata(((LEADER_METADATA, exc.grpc_address),))
        context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
    except NodeStopped:
        context.abort(grpc.StatusCode.UNAVAILABLE, "server is shutting down")
    except InvalidRequest as exc:
        context.set_trailing_metadata((("field", exc.field),))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except NotFound as exc:
        context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
    except (Conflict, IllegalTransition) as exc:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    except (DomainError, ValueError) as exc:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    raise AssertionError("unreachable")  # pragma: no cover
