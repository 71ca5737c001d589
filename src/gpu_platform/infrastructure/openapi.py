"""The REST API's OpenAPI schema as committed in docs/openapi.json (`make openapi` rewrites it;
a test fails when the code's schema differs from the committed one).

    python -m gpu_platform.infrastructure.openapi [OUT]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

from gpu_platform.adapters.inbound.rest import create_app
from gpu_platform.ports.inbound.admin_service import AdminService
from gpu_platform.ports.inbound.job_service import JobService
from gpu_platform.ports.inbound.run_as import RunAsAdmin
from gpu_platform.ports.inbound.services import ServicesApi
from gpu_platform.ports.inbound.usage import UsageQueries

__all__ = ["openapi_schema", "render"]


class _Unused:
    """Stands in for the services: building the schema never calls them."""


def openapi_schema() -> dict[str, Any]:
    """The schema of the app as `gpu-platform serve` builds it (admin and usage routes on)."""
    app = create_app(
        cast(JobService, _Unused()),
        admin=cast(AdminService, _Unused()),
        usage=cast(UsageQueries, _Unused()),
        run_as=cast(RunAsAdmin, _Unused()),
        services=cast(ServicesApi, _Unused()),
    )
    return app.openapi()


def render() -> str:
    return json.dumps(openapi_schema(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    text = render()
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
