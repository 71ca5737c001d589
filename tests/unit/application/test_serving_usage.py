"""Gateway usage per tenant: the ledger adds up what the gateway records, and the usage report
carries it beside the GPU-hours, filtered like them by tenant."""

from __future__ import annotations

from typing import Any

from gpu_platform.application.gateway.ledger import ServingLedger
from gpu_platform.application.usage import UsageService
from gpu_platform.ports.inbound.usage import ServingUsage
from gpu_platform.testing.fakes import ManualClock


class NoJobs:
    def list_jobs(self, state: Any = None) -> list[Any]:
        return []


def test_the_ledger_sums_requests_and_tokens_per_tenant() -> None:
    ledger = ServingLedger()
    ledger.record("a", 3, 5)
    ledger.record("a", 1, 0)
    ledger.record("b", 2, 2)
    assert ledger.by_tenant() == {"a": ServingUsage(2, 4, 5), "b": ServingUsage(1, 2, 2)}
    assert ledger.by_tenant("b") == {"b": ServingUsage(1, 2, 2)}


def test_the_usage_report_carries_the_serving_usage_of_the_asked_tenant() -> None:
    ledger = ServingLedger()
    ledger.record("a", 3, 5)
    ledger.record("b", 2, 2)
    usage = UsageService(NoJobs(), ManualClock(), ledger)  # type: ignore[arg-type]
    assert usage.usage().serving_by_tenant == ledger.by_tenant()
    assert usage.usage(tenant="a").serving_by_tenant == {"a": ServingUsage(1, 3, 5)}
    assert UsageService(NoJobs(), ManualClock()).usage().serving_by_tenant == {}  # type: ignore[arg-type]
