"""The HardwareStore contract."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpu_platform.domain.faults.commands import HardwareRecord
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.ports.outbound.hardware_store import HardwareStore

__all__ = ["HardwareStoreContract"]


class HardwareStoreContract:
    """Subclass and provide `make_store`: a factory; calling it again must reopen the same data."""

    @pytest.fixture
    def make_store(self) -> Callable[[], HardwareStore]:
        raise NotImplementedError

    def test_the_latest_record_of_each_gpu_and_node_survives_a_reopen(
        self, make_store: Callable[[], HardwareStore]
    ) -> None:
        store = make_store()
        store.save_hardware([HardwareRecord("gpu", "GPU-1", "DRAINING", "maintenance", 1.0)])
        store.save_hardware(
            [
                HardwareRecord("gpu", "GPU-1", "OFFLINE", "xid 79 (reboot)", 2.0),
                HardwareRecord("node", "n1", "DOWN", "no heartbeat for 60s", 2.0),
            ]
        )
        assert sorted(make_store().load_hardware(), key=lambda r: r.kind) == [
            HardwareRecord("gpu", "GPU-1", "OFFLINE", "xid 79 (reboot)", 2.0),
            HardwareRecord("node", "n1", "DOWN", "no heartbeat for 60s", 2.0),
        ]

    def test_a_gpu_and_a_node_with_one_name_are_different_records(
        self, make_store: Callable[[], HardwareStore]
    ) -> None:
        store = make_store()
        store.save_hardware(
            [
                HardwareRecord("gpu", "x", "OFFLINE", "", 1.0),
                HardwareRecord("node", "x", "DOWN", "", 1.0),
            ]
        )
        assert len(store.load_hardware()) == 2

    def test_the_audit_log_keeps_order_and_returns_the_newest_records(
        self, make_store: Callable[[], HardwareStore]
    ) -> None:
        store = make_store()
        records = [AuditRecord(float(i), "ops", "drain", f"gpu n:{i}", "why") for i in range(5)]
        for r in records:
            store.append_audit(r)
        assert make_store().audit(100) == records
        assert store.audit(2) == records[-2:]
